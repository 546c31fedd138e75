/* The CUDA device of the calling thread, if the CUDA runtime is already in the process.
 *
 * The plugin never links against CUDA and never loads it: it only looks for a runtime the
 * application (PyTorch, NCCL) has loaded already (RTLD_NOLOAD), and asks it cudaGetDevice.
 * Called at communicator init, on NCCL's thread, where the application's device is current.
 */
#include <dlfcn.h>
#include <string.h>

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

typedef int (*cu_device_get_fn)(int*, int);
typedef int (*cu_device_get_uuid_fn)(uint8_t*, int);

/* The UUID of the physical GPU behind a CUDA device ordinal, from the CUDA driver the runtime
 * has loaded (again RTLD_NOLOAD: never loaded here). The driver's legacy cuDeviceGetUuid is
 * asked, not its _v2: under MIG _v2 names the MIG instance, while DCGM and nvidia-smi label a
 * GPU by its own UUID, which is what the Agent's metrics are joined on. Runtime and driver
 * number devices alike (both honour CUDA_VISIBLE_DEVICES). Leaves out zeroed (unknown) on any
 * failure. */
void ci_cuda_device_uuid(int device, uint8_t out[16]) {
    memset(out, 0, 16);
    if (device < 0) return;
    void* lib = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
    if (!lib) return;
    cu_device_get_fn get = (cu_device_get_fn)dlsym(lib, "cuDeviceGet");
    cu_device_get_uuid_fn get_uuid = (cu_device_get_uuid_fn)dlsym(lib, "cuDeviceGetUuid");
    int handle = 0;
    uint8_t uuid[16];
    if (get && get_uuid && get(&handle, device) == 0 && get_uuid(uuid, handle) == 0) memcpy(out, uuid, 16);
    dlclose(lib);
}
