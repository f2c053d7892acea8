//! The Vulkan executor's errors, each a message a user can act on.

use ash::vk;

/// Everything that can go wrong opening or using a Vulkan device.
#[derive(Debug, thiserror::Error)]
pub enum VulkanError {
    /// The Vulkan loader library could not be opened.
    #[error("Vulkan is unavailable: cannot load {library}: {reason}")]
    NoLoader { library: String, reason: String },
    /// The loader works but offers no usable device.
    #[error("Vulkan is unavailable: {0}")]
    NoDevice(String),
    /// The device was lost (driver reset, GPU fault, hang).
    #[error("the Vulkan device was lost during {0}; results of work in flight are gone")]
    DeviceLost(&'static str),
    /// Device memory ran out.
    #[error("out of device memory during {0}")]
    OutOfDeviceMemory(&'static str),
    /// Host memory ran out inside the driver.
    #[error("out of host memory in the Vulkan driver during {0}")]
    OutOfHostMemory(&'static str),
    /// A compute pipeline could not be built.
    #[error("pipeline creation failed for kernel {kernel}: {reason}")]
    PipelineCreation { kernel: String, reason: String },
    /// Any other failing Vulkan call.
    #[error("Vulkan call {call} failed: {result}")]
    Call { call: &'static str, result: vk::Result },
    /// The process's shared device failed to open earlier; the message says why.
    #[error("{0}")]
    Earlier(String),
    /// The caller passed something the kernel cannot take.
    #[error("invalid Vulkan dispatch: {0}")]
    Invalid(String),
}

/// Maps a failing `vk::Result` of the call named `call` to the error a user sees.
pub(crate) fn map_result(call: &'static str, result: vk::Result) -> VulkanError {
    match result {
        vk::Result::ERROR_DEVICE_LOST => VulkanError::DeviceLost(call),
        vk::Result::ERROR_OUT_OF_DEVICE_MEMORY => VulkanError::OutOfDeviceMemory(call),
        vk::Result::ERROR_OUT_OF_HOST_MEMORY => VulkanError::OutOfHostMemory(call),
        _ => VulkanError::Call { call, result },
    }
}

/// `result.map_err(check("vkFoo"))`: names the call in the error.
pub(crate) fn check(call: &'static str) -> impl Fn(vk::Result) -> VulkanError {
    move |r| map_result(call, r)
}
