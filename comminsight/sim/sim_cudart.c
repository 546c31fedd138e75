/* The simulated CUDA runtime: what a training process and the Profiler ask libcudart about
 * devices, without a GPU.
 *
 * Each host thread has its own current device, as with the real runtime: cudaSetDevice sets
 * it, cudaGetDevice reads it back. The simulated NCCL sets it before each communicator init,
 * as NCCL does (cudaSetDevice(comm->cudaDev)), and the Profiler, which never loads CUDA
 * itself, finds this library the way it finds PyTorch's or JAX's runtime: already loaded,
 * by its soname (dlopen with RTLD_NOLOAD). Built with the soname libcudart.so.12.
 */
#define SIM_SUCCESS 0
#define SIM_ERROR_INVALID_VALUE 1 /* cudaErrorInvalidValue */
#define SIM_ERROR_INVALID_DEVICE 101 /* cudaErrorInvalidDevice */
#define SIM_DEVICES 64

static __thread int current_device = 0;

int cudaGetDevice(int* device) {
    if (!device) return SIM_ERROR_INVALID_VALUE;
    *device = current_device;
    return SIM_SUCCESS;
}

int cudaSetDevice(int device) {
    if (device < 0 || device >= SIM_DEVICES) return SIM_ERROR_INVALID_DEVICE;
    current_device = device;
    return SIM_SUCCESS;
}

int cudaGetDeviceCount(int* count) {
    if (!count) return SIM_ERROR_INVALID_VALUE;
    *count = SIM_DEVICES;
    return SIM_SUCCESS;
}
