/* Runs an adeadvm program from C: loads a .bib (as bytes) or assembles a .s, binds input `x`
 * (f32[2, COLS], made up here), runs on the CPU, and prints output `y` with its bits.
 *
 *   usage: mlp PROGRAM COLS
 *     PROGRAM  a .s (assembled in memory) or .bib program with an input `x` of f32[2, COLS]
 *              (or f32[B, COLS]) and an output `y`, e.g. programs/mlp.s
 *     COLS     the length of x's rows: 784 for programs/mlp.s
 *
 * From the repository root (the README's commands; the rpath lets ./mlp find the library):
 *   cargo build --release --lib
 *   cc examples/c/main.c -I include -L target/release -ladeadvm -Wl,-rpath,$PWD/target/release -o mlp
 *   ./mlp programs/mlp.s 784
 *
 * Static: cc examples/c/main.c -I include target/release/libadeadvm.a -lstdc++ -lpthread -ldl -lm -o mlp
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "adeadvm.h"

/* Prints the failed call and the library's message, then exits. */
#define CHECK(call)                                                                    \
    do {                                                                               \
        AdeadvmStatus st_ = (call);                                                    \
        if (st_ != ADEADVM_STATUS_OK) {                                                \
            fprintf(stderr, "%s failed (status %d): %s\n", #call, (int)st_, adeadvm_last_error()); \
            exit(1);                                                                   \
        }                                                                              \
    } while (0)

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n) {
        fclose(f);
        free(buf);
        return NULL;
    }
    buf[n] = '\0';
    fclose(f);
    *len = (size_t)n;
    return buf;
}

int main(int argc, char **argv) {
    char *end = NULL;
    unsigned long cols_arg = argc == 3 ? strtoul(argv[2], &end, 10) : 0;
    if (argc != 3 || *end != '\0' || cols_arg == 0 || cols_arg > (1ul << 24)) {
        fprintf(stderr,
                "usage: %s PROGRAM COLS\n"
                "  PROGRAM  a .s or .bib program with an input x of f32[2, COLS] and an output y\n"
                "  COLS     the length of x's rows, from 1 to 16777216 (784 for programs/mlp.s)\n"
                "Runs PROGRAM on the CPU with made-up x and prints y with its bits.\n"
                "example: %s programs/mlp.s 784\n",
                argv[0], argv[0]);
        return 2;
    }
    const char *path = argv[1];
    size_t cols = (size_t)cols_arg;

    size_t len = 0;
    char *file = read_file(path, &len);
    if (!file) {
        fprintf(stderr, "cannot read %s\n", path);
        return 1;
    }
    AdeadvmProgram *program = NULL;
    size_t plen = strlen(path);
    if (plen > 4 && strcmp(path + plen - 4, ".bib") == 0) {
        CHECK(adeadvm_program_from_bytes((const uint8_t *)file, len, &program));
    } else {
        CHECK(adeadvm_program_from_asm(file, path, &program));
    }
    free(file);

    uint8_t digest[32];
    CHECK(adeadvm_program_digest(program, digest, sizeof digest));
    printf("digest ");
    for (int i = 0; i < 32; i++) printf("%02x", digest[i]);
    printf("\n");

    AdeadvmConfig config;
    CHECK(adeadvm_config_default(&config));
    config.backend = "cpu";
    config.threads = 2;
    AdeadvmSession *session = NULL;
    CHECK(adeadvm_session_new(program, &config, &session));
    /* The session keeps the program alive. */
    adeadvm_program_free(program);

    size_t shape[2] = {2, cols};
    float *x = malloc(2 * cols * sizeof(float));
    if (!x) {
        fprintf(stderr, "cannot allocate x (2 x %zu floats)\n", cols);
        return 1;
    }
    for (size_t i = 0; i < 2 * cols; i++) x[i] = (float)((i * 37) % 101) / 101.0f - 0.5f;

    /* Errors come back as a status plus a message. */
    AdeadvmStatus st = adeadvm_session_set_input(session, "nope", ADEADVM_DTYPE_F32, shape, 2, x,
                                                 2 * cols * sizeof(float));
    printf("unknown input: status %d: %s\n", (int)st, adeadvm_last_error());
    st = adeadvm_session_set_input(session, "x", ADEADVM_DTYPE_I32, shape, 2, x, 2 * cols * sizeof(float));
    printf("wrong dtype: status %d: %s\n", (int)st, adeadvm_last_error());

    CHECK(adeadvm_session_set_input(session, "x", ADEADVM_DTYPE_F32, shape, 2, x, 2 * cols * sizeof(float)));
    free(x);
    CHECK(adeadvm_session_run(session));

    const char *name = "y";
    uint32_t dtype = 0;
    size_t out_shape[8];
    size_t rank = 0, nbytes = 0;
    const void *data = NULL;
    CHECK(adeadvm_session_output(session, name, &dtype, out_shape, 8, &rank, &data, &nbytes));
    printf("%s: dtype %u shape [", name, dtype);
    for (size_t i = 0; i < rank; i++) printf(i ? ", %zu" : "%zu", out_shape[i]);
    printf("] %zu bytes\n", nbytes);
    if (dtype == ADEADVM_DTYPE_F32) {
        const float *y = data;
        for (size_t i = 0; i < nbytes / sizeof(float); i++) {
            uint32_t bits;
            memcpy(&bits, &y[i], sizeof bits);
            printf("%s[%zu] = %.9g (0x%08x)\n", name, i, y[i], bits);
        }
    }
    adeadvm_session_free(session);
    printf("ok\n");
    return 0;
}
