/*
 * The run options of the C API on the example model: NULL safety of every
 * ramify_run_options_* function and of the runs that take options, a
 * deadline too short (RAMIFY_STATUS_DEADLINE) and a generous one (the
 * reference output), a time limit, cancellation before a run and from a
 * second thread during runs, reset, and the event callback (battery
 * anomalies pushed by another thread while runs go on; the callback cancels
 * the options and pushes host state itself). Built and run by
 * ffi/tests/c_program.rs, also under valgrind. Exits 0 when every check
 * passes, 1 otherwise.
 *
 * usage: options_ramify EXAMPLE_MODEL INPUT_F32 EXPECTED_F32
 *   models/inception_mini.onnx and raw native-endian float files of its
 *   reference input and output.
 */
#define _GNU_SOURCE
#include "check.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* How long the loops that run until another thread's cancel (or event)
   takes effect may go on: a cancel stays set, so the first run after it
   stops the loop; long enough for valgrind, which may schedule the other
   thread only after a whole run (with 4 s a loop once ended on time before
   the cancel was made). */
#define CANCEL_WAIT_SECONDS 120.0

static float *input, *expected;
static size_t in_count, out_count;
static int64_t shape[4] = {1, 3, 96, 96};

static void *read_file(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *buf = malloc(n > 0 ? (size_t)n : 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    *size = (size_t)n;
    return buf;
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void sleep_ms(long ms) {
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

/* Whether `n` logits match the reference output. */
static int matches(const float *y, size_t n) {
    if (n != out_count) {
        fprintf(stderr, "FAIL: %zu logits, expected %zu\n", n, out_count);
        return 0;
    }
    for (size_t k = 0; k < n; k++)
        if (!(fabsf(y[k] - expected[k]) <= 1e-4f)) {
            fprintf(stderr, "FAIL: logits[%zu] = %g, expected %g\n", k, y[k], expected[k]);
            return 0;
        }
    return 1;
}

/* One run under `opts`. A failed run must leave the output NULL; a
   successful one must match the reference. */
static RamifyStatus run(RamifySession *s, const RamifyRunOptions *opts) {
    RamifyInput v = {"input", input, sizeof(float) * in_count, RAMIFY_ELEMENT_TYPE_FLOAT, shape, 4};
    RamifyTensor *out[1] = {(RamifyTensor *)&failures}; /* must be overwritten */
    RamifyStatus st = ramify_session_run_with_options(s, &v, 1, out, 1, opts);
    if (st != RAMIFY_STATUS_OK) {
        CHECK(out[0] == NULL, "output set after %s", ramify_status_name(st));
        return st;
    }
    const void *data = NULL;
    size_t count = 0;
    CHECK(ramify_tensor_data(out[0], &data) == RAMIFY_STATUS_OK &&
              ramify_tensor_element_count(out[0], &count) == RAMIFY_STATUS_OK && matches(data, count),
          "the output differs from the reference");
    ramify_tensor_release(out[0]);
    return st;
}

static void on_event_ignored(const RamifyEvent *event, void *user_data) {
    (void)event;
    (void)user_data;
}

static void check_null_safety(RamifySession *s) {
    RamifyRunOptions *o = NULL;
    EXPECT_STATUS(ramify_run_options_create(NULL), RAMIFY_STATUS_INVALID_ARGUMENT);
    ramify_run_options_destroy(NULL);
    EXPECT_STATUS(ramify_run_options_set_deadline_ms(NULL, 10.0), RAMIFY_STATUS_INVALID_ARGUMENT);
    CHECK(strstr(ramify_last_error(), "opts is NULL") != NULL, "message names the NULL handle");
    EXPECT_STATUS(ramify_run_options_set_delay_ratio(NULL, 2.0), RAMIFY_STATUS_INVALID_ARGUMENT);
    EXPECT_STATUS(ramify_run_options_set_time_limit_ms(NULL, 10.0), RAMIFY_STATUS_INVALID_ARGUMENT);
    EXPECT_STATUS(ramify_run_options_cancel(NULL), RAMIFY_STATUS_INVALID_ARGUMENT);
    EXPECT_STATUS(ramify_run_options_reset_cancel(NULL), RAMIFY_STATUS_INVALID_ARGUMENT);
    EXPECT_STATUS(ramify_run_options_set_event_callback(NULL, on_event_ignored, NULL), RAMIFY_STATUS_INVALID_ARGUMENT);

    EXPECT_STATUS(ramify_run_options_create(&o), RAMIFY_STATUS_OK);
    /* Out-of-range values. */
    EXPECT_STATUS(ramify_run_options_set_deadline_ms(o, -1.0), RAMIFY_STATUS_INVALID_ARGUMENT);
    EXPECT_STATUS(ramify_run_options_set_deadline_ms(o, NAN), RAMIFY_STATUS_INVALID_ARGUMENT);
    EXPECT_STATUS(ramify_run_options_set_deadline_ms(o, INFINITY), RAMIFY_STATUS_INVALID_ARGUMENT);
    EXPECT_STATUS(ramify_run_options_set_time_limit_ms(o, -5.0), RAMIFY_STATUS_INVALID_ARGUMENT);
    EXPECT_STATUS(ramify_run_options_set_delay_ratio(o, 0.5), RAMIFY_STATUS_INVALID_ARGUMENT);
    CHECK(strstr(ramify_last_error(), "at least 1") != NULL, "delay ratio message");
    EXPECT_STATUS(ramify_run_options_set_delay_ratio(o, NAN), RAMIFY_STATUS_INVALID_ARGUMENT);
    EXPECT_STATUS(ramify_run_options_set_delay_ratio(o, INFINITY), RAMIFY_STATUS_INVALID_ARGUMENT);
    EXPECT_STATUS(ramify_run_options_set_event_callback(o, NULL, NULL), RAMIFY_STATUS_OK);

    /* Runs with options refuse NULL sessions, bindings and outputs. */
    RamifyInput v = {"input", input, sizeof(float) * in_count, RAMIFY_ELEMENT_TYPE_FLOAT, shape, 4};
    RamifyTensor *out[1] = {NULL};
    EXPECT_STATUS(ramify_session_run_with_options(NULL, &v, 1, out, 1, o), RAMIFY_STATUS_INVALID_ARGUMENT);
    EXPECT_STATUS(ramify_session_run_with_options(s, &v, 1, NULL, 1, o), RAMIFY_STATUS_INVALID_ARGUMENT);
    EXPECT_STATUS(ramify_session_run_with_options(s, NULL, 1, out, 1, o), RAMIFY_STATUS_INVALID_ARGUMENT);
    RamifyBinding *b = NULL;
    EXPECT_STATUS(ramify_binding_create(&b), RAMIFY_STATUS_OK);
    EXPECT_STATUS(ramify_session_run_binding_with_options(NULL, b, o), RAMIFY_STATUS_INVALID_ARGUMENT);
    EXPECT_STATUS(ramify_session_run_binding_with_options(s, NULL, o), RAMIFY_STATUS_INVALID_ARGUMENT);
    ramify_binding_destroy(b);
    /* NULL options are the defaults. */
    EXPECT_STATUS(run(s, NULL), RAMIFY_STATUS_OK);
    ramify_run_options_destroy(o);

    CHECK(strcmp(ramify_status_name(RAMIFY_STATUS_DEADLINE), "RAMIFY_STATUS_DEADLINE") == 0, "status name");
    CHECK(strcmp(ramify_status_name(RAMIFY_STATUS_CANCELLED), "RAMIFY_STATUS_CANCELLED") == 0, "status name");
}

/* A binding of the example's input tensor and the caller's logits buffer. */
struct bound {
    RamifyBinding *binding;
    RamifyTensor *tensor;
    float logits[100];
};

static void bind_example(struct bound *bd) {
    void *data = NULL;
    bd->binding = NULL;
    bd->tensor = NULL;
    EXPECT_STATUS(ramify_tensor_create(RAMIFY_ELEMENT_TYPE_FLOAT, shape, 4, &bd->tensor), RAMIFY_STATUS_OK);
    EXPECT_STATUS(ramify_tensor_mutable_data(bd->tensor, &data), RAMIFY_STATUS_OK);
    if (data) memcpy(data, input, sizeof(float) * in_count);
    EXPECT_STATUS(ramify_binding_create(&bd->binding), RAMIFY_STATUS_OK);
    EXPECT_STATUS(ramify_binding_bind_input(bd->binding, "input", bd->tensor), RAMIFY_STATUS_OK);
    EXPECT_STATUS(ramify_binding_bind_output(bd->binding, "logits", bd->logits, sizeof bd->logits),
                  RAMIFY_STATUS_OK);
}

static void unbind_example(struct bound *bd) {
    ramify_binding_destroy(bd->binding);
    ramify_tensor_release(bd->tensor);
}

/* A binding run under `opts`: a failure must leave the buffer alone, a
   success fill it with the reference. */
static RamifyStatus run_bound(RamifySession *s, struct bound *bd, const RamifyRunOptions *opts) {
    for (size_t k = 0; k < 100; k++) bd->logits[k] = -7.0f;
    RamifyStatus st = ramify_session_run_binding_with_options(s, bd->binding, opts);
    if (st == RAMIFY_STATUS_OK)
        CHECK(out_count == 100 && matches(bd->logits, 100), "the bound buffer differs from the reference");
    else
        CHECK(bd->logits[0] == -7.0f && bd->logits[99] == -7.0f, "buffer written after %s", ramify_status_name(st));
    return st;
}

static void check_deadline(RamifySession *s) {
    RamifyRunOptions *o = NULL;
    struct bound bd;
    EXPECT_STATUS(ramify_run_options_create(&o), RAMIFY_STATUS_OK);
    bind_example(&bd);
    /* 1 µs (× the default ratio 1.5) cannot fit the estimated work. */
    EXPECT_STATUS(ramify_run_options_set_deadline_ms(o, 0.001), RAMIFY_STATUS_OK);
    EXPECT_STATUS(run(s, o), RAMIFY_STATUS_DEADLINE);
    CHECK(strstr(ramify_last_error(), "ramify_session_run_with_options: deadline") == ramify_last_error(),
          "deadline message");
    EXPECT_STATUS(run_bound(s, &bd, o), RAMIFY_STATUS_DEADLINE);
    CHECK(strstr(ramify_last_error(), "deadline") != NULL, "deadline message of the binding run");
    /* 10 minutes is plenty, even under valgrind on a loaded machine (10 s
     * was not: one CI run stopped after 1 of 44 operators with 8.8 s still
     * estimated): the run gives the reference output. */
    EXPECT_STATUS(ramify_run_options_set_deadline_ms(o, 600000.0), RAMIFY_STATUS_OK);
    EXPECT_STATUS(run(s, o), RAMIFY_STATUS_OK);
    EXPECT_STATUS(ramify_run_options_set_delay_ratio(o, 1.0), RAMIFY_STATUS_OK);
    EXPECT_STATUS(run_bound(s, &bd, o), RAMIFY_STATUS_OK);
    /* A delay ratio without a deadline is refused by the run. */
    EXPECT_STATUS(ramify_run_options_set_deadline_ms(o, 0.0), RAMIFY_STATUS_OK);
    EXPECT_STATUS(run(s, o), RAMIFY_STATUS_INVALID_ARGUMENT);
    CHECK(strstr(ramify_last_error(), "without a deadline") != NULL, "delay ratio without deadline");
    ramify_run_options_destroy(o);

    /* A time limit of 1 µs has passed before the last operator. */
    EXPECT_STATUS(ramify_run_options_create(&o), RAMIFY_STATUS_OK);
    EXPECT_STATUS(ramify_run_options_set_time_limit_ms(o, 0.001), RAMIFY_STATUS_OK);
    EXPECT_STATUS(run(s, o), RAMIFY_STATUS_DEADLINE);
    CHECK(strstr(ramify_last_error(), "time limit") != NULL, "time-limit message");
    EXPECT_STATUS(ramify_run_options_set_time_limit_ms(o, 0.0), RAMIFY_STATUS_OK);
    EXPECT_STATUS(run_bound(s, &bd, o), RAMIFY_STATUS_OK);
    ramify_run_options_destroy(o);
    unbind_example(&bd);
}

struct canceller {
    RamifyRunOptions *opts;
    atomic_int started; /* set by the main thread before its first run */
    atomic_int done;    /* set once the cancel returned */
    RamifyStatus status;
};

static void *cancel_soon(void *arg) {
    struct canceller *c = arg;
    while (!atomic_load(&c->started)) sleep_ms(1);
    sleep_ms(5);
    c->status = ramify_run_options_cancel(c->opts);
    atomic_store(&c->done, 1);
    return NULL;
}

static void check_cancel(RamifySession *s) {
    RamifyRunOptions *o = NULL;
    struct bound bd;
    EXPECT_STATUS(ramify_run_options_create(&o), RAMIFY_STATUS_OK);
    bind_example(&bd);
    /* Cancelled before the run, and it stays cancelled. */
    EXPECT_STATUS(ramify_run_options_cancel(o), RAMIFY_STATUS_OK);
    EXPECT_STATUS(run(s, o), RAMIFY_STATUS_CANCELLED);
    CHECK(strstr(ramify_last_error(), "cancelled") != NULL, "cancel message");
    EXPECT_STATUS(run(s, o), RAMIFY_STATUS_CANCELLED);
    EXPECT_STATUS(run_bound(s, &bd, o), RAMIFY_STATUS_CANCELLED);
    EXPECT_STATUS(ramify_run_options_reset_cancel(o), RAMIFY_STATUS_OK);
    EXPECT_STATUS(run_bound(s, &bd, o), RAMIFY_STATUS_OK);

    /* Cancelled from a second thread while runs go on. */
    struct canceller c = {o, 0, 0, RAMIFY_STATUS_INTERNAL_ERROR};
    pthread_t t;
    CHECK(pthread_create(&t, NULL, cancel_soon, &c) == 0, "pthread_create");
    atomic_store(&c.started, 1);
    RamifyStatus st = RAMIFY_STATUS_OK;
    int runs = 0;
    /* Runs until one sees the cancel (see CANCEL_WAIT_SECONDS). */
    double end = now_s() + CANCEL_WAIT_SECONDS;
    while (st == RAMIFY_STATUS_OK && now_s() < end) {
        st = run(s, o);
        runs++;
    }
    pthread_join(t, NULL);
    CHECK(c.status == RAMIFY_STATUS_OK, "ramify_run_options_cancel returned %s", ramify_status_name(c.status));
    CHECK(st == RAMIFY_STATUS_CANCELLED, "the run loop ended with %s after %d runs", ramify_status_name(st), runs);
    printf("cancel from another thread: stopped run %d\n", runs);
    /* After a reset the same session and options run correctly. */
    EXPECT_STATUS(ramify_run_options_reset_cancel(o), RAMIFY_STATUS_OK);
    EXPECT_STATUS(run(s, o), RAMIFY_STATUS_OK);
    ramify_run_options_destroy(o);
    unbind_example(&bd);
}

/* What the event callback saw. */
struct seen {
    RamifyRunOptions *opts;
    RamifySession *session;
    atomic_int in_run; /* 1 while the main thread is inside a run call */
    atomic_int events, battery_anomalies, outside_run, wrong_thread, bad_event, failed_calls;
};

static void on_event(const RamifyEvent *e, void *user_data) {
    struct seen *seen = user_data;
    atomic_fetch_add(&seen->events, 1);
    if (!atomic_load(&seen->in_run)) atomic_fetch_add(&seen->outside_run, 1);
    char name[32] = "";
    pthread_getname_np(pthread_self(), name, sizeof name);
    if (strcmp(name, "ramify-events") != 0) atomic_fetch_add(&seen->wrong_thread, 1);
    if (!e || !e->message || !e->message[0] || !(e->at_ms >= 0.0)) {
        atomic_fetch_add(&seen->bad_event, 1);
        return;
    }
    if (e->kind == RAMIFY_EVENT_KIND_DEVICE_ANOMALY && e->metric == RAMIFY_METRIC_BATTERY) {
        if (e->source != RAMIFY_EVENT_SOURCE_HOST || !(e->value < e->threshold) || !isnan(e->previous) ||
            !strstr(e->message, "battery anomaly"))
            atomic_fetch_add(&seen->bad_event, 1);
        atomic_fetch_add(&seen->battery_anomalies, 1);
        /* The callback may cancel and push host state. */
        if (ramify_run_options_cancel(seen->opts) != RAMIFY_STATUS_OK) atomic_fetch_add(&seen->failed_calls, 1);
        if (ramify_session_push_host_state(seen->session, -1.0, 0.9, -1.0) != RAMIFY_STATUS_OK)
            atomic_fetch_add(&seen->failed_calls, 1);
    }
}

struct pusher {
    RamifySession *session;
    atomic_int stop;
};

/* Battery full, then nearly empty, again and again: every fall below 15 %
   is an anomaly. */
static void *push_battery(void *arg) {
    struct pusher *p = arg;
    while (!atomic_load(&p->stop)) {
        ramify_session_push_host_state(p->session, -1.0, 0.9, -1.0);
        sleep_ms(1);
        ramify_session_push_host_state(p->session, -1.0, 0.05, -1.0);
        sleep_ms(1);
    }
    return NULL;
}

static void check_events(RamifySession *s) {
    RamifyRunOptions *o = NULL;
    EXPECT_STATUS(ramify_run_options_create(&o), RAMIFY_STATUS_OK);
    struct seen seen = {o, s, 0, 0, 0, 0, 0, 0, 0};
    EXPECT_STATUS(ramify_run_options_set_event_callback(o, on_event, &seen), RAMIFY_STATUS_OK);
    struct pusher p = {s, 0};
    pthread_t t;
    CHECK(pthread_create(&t, NULL, push_battery, &p) == 0, "pthread_create");
    /* Runs until the callback, having seen a battery anomaly, cancels. */
    RamifyStatus st = RAMIFY_STATUS_OK;
    int runs = 0;
    double end = now_s() + CANCEL_WAIT_SECONDS;
    while (st == RAMIFY_STATUS_OK && now_s() < end) {
        atomic_store(&seen.in_run, 1);
        st = run(s, o);
        atomic_store(&seen.in_run, 0);
        runs++;
    }
    atomic_store(&p.stop, 1);
    pthread_join(t, NULL);
    CHECK(st == RAMIFY_STATUS_CANCELLED, "the run loop ended with %s after %d runs", ramify_status_name(st), runs);
    CHECK(atomic_load(&seen.battery_anomalies) >= 1, "no battery anomaly in %d runs (%d events)", runs,
          atomic_load(&seen.events));
    printf("events: %d in %d runs, %d battery anomalies\n", atomic_load(&seen.events), runs,
           atomic_load(&seen.battery_anomalies));
    CHECK(atomic_load(&seen.outside_run) == 0, "%d events outside a run call", atomic_load(&seen.outside_run));
    CHECK(atomic_load(&seen.wrong_thread) == 0, "%d events not on ramify-events", atomic_load(&seen.wrong_thread));
    CHECK(atomic_load(&seen.bad_event) == 0, "%d malformed events", atomic_load(&seen.bad_event));
    CHECK(atomic_load(&seen.failed_calls) == 0, "%d calls from the callback failed", atomic_load(&seen.failed_calls));
    /* Without the callback and once reset, a run is quiet and correct. */
    EXPECT_STATUS(ramify_run_options_set_event_callback(o, NULL, NULL), RAMIFY_STATUS_OK);
    EXPECT_STATUS(ramify_run_options_reset_cancel(o), RAMIFY_STATUS_OK);
    int before = atomic_load(&seen.events);
    ramify_session_push_host_state(s, -1.0, 0.9, -1.0);
    EXPECT_STATUS(run(s, o), RAMIFY_STATUS_OK);
    CHECK(atomic_load(&seen.events) == before, "the removed callback was called");
    ramify_run_options_destroy(o);
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s EXAMPLE_MODEL INPUT_F32 EXPECTED_F32\n", argv[0]);
        return 2;
    }
    size_t in_bytes = 0, out_bytes = 0;
    input = read_file(argv[2], &in_bytes);
    expected = read_file(argv[3], &out_bytes);
    in_count = in_bytes / sizeof(float);
    out_count = out_bytes / sizeof(float);
    if (!input || !expected || in_count != 3 * 96 * 96 || out_count != 100) {
        fprintf(stderr, "FAIL: cannot read the reference data %s and %s\n", argv[2], argv[3]);
        return 1;
    }
    RamifySessionOptions *so = NULL;
    RamifySession *s = NULL;
    EXPECT_STATUS(ramify_session_options_create(&so), RAMIFY_STATUS_OK);
    EXPECT_STATUS(ramify_session_options_set_cpus(so, 2), RAMIFY_STATUS_OK);
    EXPECT_STATUS(ramify_session_create_from_file(argv[1], so, &s), RAMIFY_STATUS_OK);
    ramify_session_options_destroy(so);
    if (s) {
        check_null_safety(s);
        check_deadline(s);
        check_cancel(s);
        check_events(s);
    }
    ramify_session_destroy(s);
    free(input);
    free(expected);
    if (failures) {
        fprintf(stderr, "options_ramify: %d failure(s)\n", failures);
        return 1;
    }
    printf("options_ramify: all checks passed\n");
    return 0;
}
