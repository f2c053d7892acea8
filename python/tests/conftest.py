def pytest_configure(config):
    config.addinivalue_line(
        "markers", "smollm2: SmolLM2-135M against its float64 reference (python/tests/test_smollm2.py; -m smollm2 runs it alone)"
    )
