/*
 * Soak through the C API: THREADS threads run one adaptive session RUNS
 * times each while busy child processes come and go, and every output must
 * equal, byte for byte, the output of a one-CPU serial session on the same
 * input. Built and run by ffi/tests/c_program.rs (natively and under
 * valgrind). Exits 0 when every run agrees and every thread finishes.
 *
 * usage: soak_ramify MODEL THREADS RUNS
 *   MODEL: models/inception_mini.onnx (input "input" [1,3,96,96] float).
 */
#define _DEFAULT_SOURCE
#include "ramify.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#define INPUTS 4
#define IN_COUNT (3 * 96 * 96)

static float inputs[INPUTS][IN_COUNT];
static float *expected[INPUTS];
static size_t out_count;

struct worker {
    RamifySession *session;
    int index;
    int runs;
    int failed;
};

/* Runs the session on input k; returns a malloc'd copy of output 0 or NULL. */
static float *run_once(RamifySession *s, int k, size_t *count) {
    int64_t shape[4] = {1, 3, 96, 96};
    RamifyInput v = {"input", inputs[k], sizeof inputs[k], RAMIFY_ELEMENT_TYPE_FLOAT, shape, 4};
    RamifyTensor *out[1] = {NULL};
    RamifyStatus st = ramify_session_run(s, &v, 1, out, 1);
    if (st != RAMIFY_STATUS_OK) {
        fprintf(stderr, "FAIL run: %s: %s\n", ramify_status_name(st), ramify_last_error());
        return NULL;
    }
    const void *data = NULL;
    float *copy = NULL;
    if (ramify_tensor_data(out[0], &data) == RAMIFY_STATUS_OK &&
        ramify_tensor_element_count(out[0], count) == RAMIFY_STATUS_OK) {
        copy = malloc(*count * sizeof(float));
        if (copy) memcpy(copy, data, *count * sizeof(float));
    }
    ramify_tensor_release(out[0]);
    return copy;
}

static void *worker_main(void *arg) {
    struct worker *w = arg;
    for (int i = 0; i < w->runs; i++) {
        int k = (w->index + i) % INPUTS;
        size_t count = 0;
        float *y = run_once(w->session, k, &count);
        if (!y || count != out_count || memcmp(y, expected[k], count * sizeof(float)) != 0) {
            fprintf(stderr, "FAIL thread %d run %d: input %d differs from the serial run\n", w->index, i, k);
            w->failed = 1;
        }
        free(y);
    }
    return NULL;
}

/* A busy child process, stopped with SIGKILL by its parent. */
static pid_t start_busy(void) {
    pid_t pid = fork();
    if (pid == 0) {
        volatile unsigned long x = 0;
        alarm(60); /* never outlives a stuck parent for long */
        for (;;) x = x * 6364136223846793005UL + 1;
    }
    return pid;
}

static RamifySession *open_session(const char *model, int cpus, int32_t mode) {
    RamifySessionOptions *o = NULL;
    RamifySession *s = NULL;
    if (ramify_session_options_create(&o) != RAMIFY_STATUS_OK) return NULL;
    ramify_session_options_set_cpus(o, cpus);
    ramify_session_options_set_mode(o, mode);
    if (ramify_session_create_from_file(model, o, &s) != RAMIFY_STATUS_OK)
        fprintf(stderr, "FAIL loading %s: %s\n", model, ramify_last_error());
    ramify_session_options_destroy(o);
    return s;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s MODEL THREADS RUNS\n", argv[0]);
        return 2;
    }
    int threads = atoi(argv[2]), runs = atoi(argv[3]);
    if (threads < 1 || threads > 64 || runs < 1) {
        fprintf(stderr, "THREADS must be 1..64 and RUNS at least 1\n");
        return 2;
    }
    for (int k = 0; k < INPUTS; k++)
        for (int i = 0; i < IN_COUNT; i++) inputs[k][i] = (float)((i * (k + 3) + k * 7) % 29) * 0.07f - 1.0f;

    RamifySession *serial = open_session(argv[1], 1, RAMIFY_MODE_SERIAL);
    if (!serial) return 1;
    int failed = 0;
    for (int k = 0; k < INPUTS; k++) {
        expected[k] = run_once(serial, k, &out_count);
        if (!expected[k]) failed = 1;
    }
    ramify_session_destroy(serial);
    RamifySession *s = failed ? NULL : open_session(argv[1], 2, RAMIFY_MODE_ADAPTIVE);
    if (!s) failed = 1;

    if (s) {
        struct worker *w = calloc((size_t)threads, sizeof *w);
        pthread_t *t = calloc((size_t)threads, sizeof *t);
        for (int i = 0; i < threads; i++) {
            w[i] = (struct worker){s, i, runs, 0};
            if (pthread_create(&t[i], NULL, worker_main, &w[i]) != 0) {
                fprintf(stderr, "FAIL pthread_create\n");
                return 1;
            }
        }
        /* Load comes and goes while the workers run: 1, 2, 1, 0 busy children. */
        const int levels[4] = {1, 2, 1, 0};
        for (int step = 0; step < 4; step++) {
            pid_t busy[2] = {0, 0};
            for (int b = 0; b < levels[step]; b++) busy[b] = start_busy();
            usleep(200 * 1000);
            for (int b = 0; b < levels[step]; b++)
                if (busy[b] > 0) {
                    kill(busy[b], SIGKILL);
                    waitpid(busy[b], NULL, 0);
                }
        }
        for (int i = 0; i < threads; i++) {
            pthread_join(t[i], NULL);
            if (w[i].failed) failed = 1;
        }
        free(w);
        free(t);
    }
    ramify_session_destroy(s);
    for (int k = 0; k < INPUTS; k++) free(expected[k]);
    if (failed) {
        fprintf(stderr, "soak_ramify: failed\n");
        return 1;
    }
    printf("soak_ramify: %d threads x %d runs agree with the serial run\n", threads, runs);
    return 0;
}
