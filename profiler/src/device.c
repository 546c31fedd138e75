/* The CUDA device of the calling thread, if the CUDA runtime is already in the process.
 *
 * The plugin never links against CUDA and never loads it: it only looks for a runtime the
 * application (PyTorch, NCCL) has loaded already (RTLD_NOLOAD), and asks it cudaGetDevice.
 * Called at communicator init, on NCCL's thread, where the application's device is current.
 */
#include <dlfcn.h>

#include "ci_internal.h"

typedef int (*get_device_fn)(int*);

int ci_cuda_device(void) {
    static const char* sonames[] = {"libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0", "libcudart.so"};
    for (size_t i = 0; i < sizeof(sonames) / sizeof(sonames[0]); i++) {
        void* lib = dlopen(sonames[i], RTLD_LAZY | RTLD_NOLOAD);
        if (!lib) continue;
        get_device_fn get = (get_device_fn)dlsym(lib, "cudaGetDevice");
        int device = -1;
        int ok = get && get(&device) == 0;
        dlclose(lib); /* drops only the reference RTLD_NOLOAD took */
        if (ok) return device;
    }
    return CI_SHM_V1_NO_RANK;
}
