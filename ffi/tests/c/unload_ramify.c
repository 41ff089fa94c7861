/* Loads libramify_ffi.so with dlopen, creates, runs and destroys sessions
 * (with the live load monitor, so its sampler and the pools start), checks
 * that no thread of the library remains once the last session is destroyed,
 * then unloads the library with dlclose and exits cleanly.
 *
 * Usage: unload_ramify LIBRAMIFY_FFI_SO TINY_MODEL
 * (the tiny model: x[N,4] -> MatMul(W[4,3]) -> Add(b[3]) -> y[N,3]). */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ramify.h"

/* Function pointers looked up by name: the program never links the library. */
#define API(name) static __typeof__(&name) p_##name
API(ramify_last_error);
API(ramify_session_options_create);
API(ramify_session_options_destroy);
API(ramify_session_options_set_cpus);
API(ramify_session_create_from_file);
API(ramify_session_destroy);
API(ramify_session_run);
API(ramify_tensor_release);

/* Number of threads of this process; prints their names when `show`. */
static int thread_count(int show) {
    DIR *d = opendir("/proc/self/task");
    if (!d) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        n++;
        if (show) {
            char path[300], name[64] = "?";
            snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
            FILE *f = fopen(path, "r");
            if (f) {
                if (!fgets(name, sizeof name, f)) strcpy(name, "?");
                fclose(f);
            }
            fprintf(stderr, "  thread %s: %s", e->d_name, name);
        }
    }
    closedir(d);
    return n;
}

/* The thread count once it is back to `want`, waiting up to a second: the
 * library joined its threads, and the kernel drops an exited thread's /proc
 * entry a moment after the join returns. */
static int settled_thread_count(int want) {
    struct timespec ms = {0, 1000000};
    int n = thread_count(0);
    for (int i = 0; i < 1000 && n != want; i++) {
        nanosleep(&ms, NULL);
        n = thread_count(0);
    }
    return n;
}

#define LOOKUP(name)                                                   \
    do {                                                               \
        *(void **)(&p_##name) = dlsym(lib, #name);                     \
        if (!p_##name) {                                               \
            fprintf(stderr, "FAIL dlsym %s: %s\n", #name, dlerror()); \
            return 1;                                                  \
        }                                                              \
    } while (0)

static int run_once(const char *model) {
    RamifySessionOptions *o = NULL;
    RamifySession *s = NULL;
    if (p_ramify_session_options_create(&o) != RAMIFY_STATUS_OK ||
        p_ramify_session_options_set_cpus(o, 2) != RAMIFY_STATUS_OK ||
        p_ramify_session_create_from_file(model, o, &s) != RAMIFY_STATUS_OK) {
        fprintf(stderr, "FAIL creating a session: %s\n", p_ramify_last_error());
        p_ramify_session_options_destroy(o);
        return 1;
    }
    p_ramify_session_options_destroy(o);
    float x[8] = {1, 2, 3, 4, -1, -2, -3, -4};
    int64_t shape[2] = {2, 4};
    RamifyInput v = {"x", x, sizeof x, RAMIFY_ELEMENT_TYPE_FLOAT, shape, 2};
    int bad = 0;
    for (int i = 0; i < 3 && !bad; i++) {
        RamifyTensor *out[1] = {NULL};
        if (p_ramify_session_run(s, &v, 1, out, 1) != RAMIFY_STATUS_OK) {
            fprintf(stderr, "FAIL run: %s\n", p_ramify_last_error());
            bad = 1;
        }
        p_ramify_tensor_release(out[0]);
    }
    p_ramify_session_destroy(s);
    return bad;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s LIBRAMIFY_FFI_SO TINY_MODEL\n", argv[0]);
        return 2;
    }
    int before = thread_count(0);
    void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        fprintf(stderr, "FAIL dlopen: %s\n", dlerror());
        return 1;
    }
    LOOKUP(ramify_last_error);
    LOOKUP(ramify_session_options_create);
    LOOKUP(ramify_session_options_destroy);
    LOOKUP(ramify_session_options_set_cpus);
    LOOKUP(ramify_session_create_from_file);
    LOOKUP(ramify_session_destroy);
    LOOKUP(ramify_session_run);
    LOOKUP(ramify_tensor_release);

    for (int round = 0; round < 3; round++) {
        if (run_once(argv[2])) return 1;
        /* Destroy joined every thread the session owned: none remains, and
         * none of the library's own (no process-wide pool) either. */
        int now = settled_thread_count(before);
        if (now != before) {
            fprintf(stderr, "FAIL round %d: %d threads after destroy, %d before:\n", round, now, before);
            thread_count(1);
            return 1;
        }
    }
    if (dlclose(lib) != 0) {
        fprintf(stderr, "FAIL dlclose: %s\n", dlerror());
        return 1;
    }
    if (settled_thread_count(before) != before) {
        fprintf(stderr, "FAIL threads after dlclose\n");
        return 1;
    }
    printf("unload_ramify: 3 sessions created, run and destroyed; no thread left; dlclose ok\n");
    return 0;
}
