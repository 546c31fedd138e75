/* Reads shm v1 op slots from a file and prints, per slot, what the Profiler's log writer takes
 * for it (profiler/src/op_timing.h): duration in ns, algorithm and bus bandwidth, each double
 * with 17 significant digits (enough to read back the same bits). */
#include <stdio.h>

#include "op_timing.h"

int main(int argc, char** argv) {
    if (argc != 2) return 2;
    FILE* f = fopen(argv[1], "rb");
    if (!f) return 2;
    ci_shm_op_slot_v1_t r;
    while (fread(&r, sizeof(r), 1, f) == 1) {
        uint64_t ns = ci_op_duration_ns(&r);
        double algbw, busbw;
        ci_op_bandwidths_gbs(&r, ns, &algbw, &busbw);
        printf("%llu %.17g %.17g\n", (unsigned long long)ns, algbw, busbw);
    }
    fclose(f);
    return 0;
}
