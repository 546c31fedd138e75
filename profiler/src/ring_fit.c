/* The ring's size on this node: what the configuration asks for, or less where the SHM file
 * system cannot hold it next to the node's other processes.
 *
 * A container's /dev/shm is 64 MiB by default; the default ring (65536 records, 16 MiB of
 * region) let three or four processes of a node in and left the others without SHM, invisible
 * to the Agent. Each process now takes at most its share of the file system (its size over
 * the node's processes: LOCAL_WORLD_SIZE, and at least 8, the GPUs of a node) and at most half
 * of what is free, so NCCL's own segments keep room. The ring is halved until the region fits
 * (never below RING_SLOTS_MIN); the header says what was asked and why less was taken, and
 * the warning says it once. Where even the smallest region cannot be allocated, creating it
 * fails as before and SHM is disabled with a warning: training never waits for space.
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/statvfs.h>

#include "ci_internal.h"

#define RING_SLOTS_MIN 64u /* COMMINSIGHT_PROFILER_RING_SLOTS' minimum */
#define NODE_PROCESSES_MIN 8u

static uint32_t local_processes(void) {
    const char* v = getenv("LOCAL_WORLD_SIZE");
    char* end;
    long n = v && *v ? strtol(v, &end, 10) : 0;
    if (!v || !*v || *end || n < (long)NODE_PROCESSES_MIN || n > 65536) return NODE_PROCESSES_MIN;
    return (uint32_t)n;
}

uint32_t ci_ring_slots_to_fit(uint64_t fs_bytes, uint64_t fs_free, uint32_t processes, size_t fixed,
                              uint32_t slots) {
    if (!fs_bytes || !processes) return slots; /* nothing known: as configured */
    uint64_t budget = fs_bytes / processes;
    if (budget > fs_free / 2) budget = fs_free / 2;
    while (slots > RING_SLOTS_MIN && fixed + (uint64_t)slots * sizeof(ci_shm_op_slot_v1_t) > budget) slots >>= 1;
    return slots;
}

void ci_ring_fit(const char* dir, int dir_fd, size_t fixed) {
    ci_config_t* cfg = &ci_g.cfg;
    ci_g.ring_slots_configured = cfg->ring_slots;
    ci_g.sizing_processes = local_processes();
    ci_g.shm_dir_bytes = ci_g.shm_dir_free_bytes = 0;
    struct statvfs vfs;
    if ((dir_fd >= 0 ? fstatvfs(dir_fd, &vfs) : statvfs(dir, &vfs)) != 0) return;
    ci_g.shm_dir_bytes = (uint64_t)vfs.f_blocks * vfs.f_frsize;
    ci_g.shm_dir_free_bytes = (uint64_t)vfs.f_bavail * vfs.f_frsize;
    uint32_t slots = ci_ring_slots_to_fit(ci_g.shm_dir_bytes, ci_g.shm_dir_free_bytes, ci_g.sizing_processes,
                                          fixed, cfg->ring_slots);
    if (slots == cfg->ring_slots) return;
    const double mib = 1024.0 * 1024.0;
    ci_warn("SHM ring sized down from %u to %u records to fit %s (%.1f MiB, %.1f MiB free, shared by %u "
            "processes): the Agent sees every record, but a slow reader loses them sooner",
            cfg->ring_slots, slots, dir, (double)ci_g.shm_dir_bytes / mib, (double)ci_g.shm_dir_free_bytes / mib,
            ci_g.sizing_processes);
    cfg->ring_slots = slots;
}
