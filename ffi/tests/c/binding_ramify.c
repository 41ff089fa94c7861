/*
 * The C API for apps beyond ramify_session_run: tensors the app creates and
 * binds without a copy, outputs chosen by name, preallocated output buffers
 * (too small ones included), model metadata, symbolic dimension names, the
 * CPU limit and the CPU set. Built and run by ffi/tests/c_program.rs (also
 * under valgrind). Exits 0 when every check passes, 1 otherwise.
 *
 * usage: binding_ramify THREE_HEADS_MODEL
 *   x[N,4] -> y = x.W + b [N,3], r = Relu(x) [?,4], s = Sigmoid(x) (no shape)
 *   (ffi/tests/common/model.rs, three_heads_bytes)
 */
#define _GNU_SOURCE
#include "check.h"

#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static float y_of(const float *x, int row, int col) {
    float v = B[col];
    for (int k = 0; k < 4; k++) v += x[row * 4 + k] * W[k * 3 + col];
    return v;
}

static int close_to(float a, float b) { return fabsf(a - b) <= 1e-5f; }

static RamifySession *load(const char *path, RamifySessionOptions *o) {
    RamifySession *s = NULL;
    EXPECT_STATUS(ramify_session_create_from_file(path, o, &s), RAMIFY_STATUS_OK);
    return s;
}

static void check_metadata(RamifySession *s) {
    RamifyModelMetadata m;
    memset(&m, 0, sizeof m);
    EXPECT_STATUS(ramify_session_metadata(s, &m), RAMIFY_STATUS_OK);
    CHECK(m.producer_name && strcmp(m.producer_name, "ramify-tests") == 0, "producer");
    CHECK(m.producer_version && strcmp(m.producer_version, "2.0") == 0, "producer version");
    CHECK(m.domain && strcmp(m.domain, "org.ramify.tests") == 0, "domain");
    CHECK(m.description && strcmp(m.description, "three heads on one input") == 0, "description");
    CHECK(m.graph_name && strcmp(m.graph_name, "three_heads") == 0, "graph name");
    CHECK(m.graph_description && strcmp(m.graph_description, "a test graph") == 0, "graph description");
    CHECK(m.model_version == 3 && m.ir_version == 8, "versions %lld %lld", (long long)m.model_version,
          (long long)m.ir_version);
    CHECK(m.custom_count == 2, "custom count %zu", m.custom_count);
    const char *key = NULL, *value = NULL;
    EXPECT_STATUS(ramify_session_custom_metadata(s, 1, &key, &value), RAMIFY_STATUS_OK);
    CHECK(key && value && strcmp(key, "mean") == 0 && strcmp(value, "0.5") == 0, "custom pair 1");
    EXPECT_STATUS(ramify_session_custom_metadata(s, 2, &key, &value), RAMIFY_STATUS_INVALID_ARGUMENT);
    EXPECT_STATUS(ramify_session_lookup_metadata(s, "labels", &value), RAMIFY_STATUS_OK);
    CHECK(value && strcmp(value, "cat,dog,bird") == 0, "labels");
    EXPECT_STATUS(ramify_session_lookup_metadata(s, "missing", &value), RAMIFY_STATUS_OK);
    CHECK(value == NULL, "a missing key gives NULL");
    /* NULL-safety. */
    EXPECT_STATUS(ramify_session_metadata(NULL, &m), RAMIFY_STATUS_INVALID_ARGUMENT);
    EXPECT_STATUS(ramify_session_metadata(s, NULL), RAMIFY_STATUS_INVALID_ARGUMENT);
    EXPECT_STATUS(ramify_session_custom_metadata(s, 0, NULL, &value), RAMIFY_STATUS_INVALID_ARGUMENT);
    EXPECT_STATUS(ramify_session_custom_metadata(s, 0, &key, NULL), RAMIFY_STATUS_INVALID_ARGUMENT);
    EXPECT_STATUS(ramify_session_custom_metadata(NULL, 0, &key, &value), RAMIFY_STATUS_INVALID_ARGUMENT);
    EXPECT_STATUS(ramify_session_lookup_metadata(s, NULL, &value), RAMIFY_STATUS_INVALID_ARGUMENT);
    EXPECT_STATUS(ramify_session_lookup_metadata(s, "labels", NULL), RAMIFY_STATUS_INVALID_ARGUMENT);
    EXPECT_STATUS(ramify_session_lookup_metadata(NULL, "labels", &value), RAMIFY_STATUS_INVALID_ARGUMENT);
}

static void check_dimensions(RamifySession *s) {
    const char *name = (const char *)&failures; /* must be overwritten */
    EXPECT_STATUS(ramify_session_input_dim_name(s, 0, 0, &name), RAMIFY_STATUS_OK);
    CHECK(name && strcmp(name, "N") == 0, "x's first dimension is N");
    EXPECT_STATUS(ramify_session_input_dim_name(s, 0, 1, &name), RAMIFY_STATUS_OK);
    CHECK(name == NULL, "a fixed dimension has no name");
    EXPECT_STATUS(ramify_session_output_dim_name(s, 1, 0, &name), RAMIFY_STATUS_OK);
    CHECK(name && name[0] == '\0', "an unnamed free dimension is \"\"");
    EXPECT_STATUS(ramify_session_input_dim_name(s, 0, 2, &name), RAMIFY_STATUS_INVALID_ARGUMENT);
    EXPECT_STATUS(ramify_session_output_dim_name(s, 2, 0, &name), RAMIFY_STATUS_INVALID_ARGUMENT);
    EXPECT_STATUS(ramify_session_output_dim_name(s, 3, 0, &name), RAMIFY_STATUS_INVALID_ARGUMENT);
    EXPECT_STATUS(ramify_session_input_dim_name(NULL, 0, 0, &name), RAMIFY_STATUS_INVALID_ARGUMENT);
    EXPECT_STATUS(ramify_session_input_dim_name(s, 0, 0, NULL), RAMIFY_STATUS_INVALID_ARGUMENT);
    /* One rank type: size_t, with RAMIFY_RANK_UNKNOWN for no declared shape. */
    const int64_t *dims = NULL;
    size_t rank = 0;
    EXPECT_STATUS(ramify_session_output_shape(s, 2, &dims, &rank), RAMIFY_STATUS_OK);
    CHECK(rank == RAMIFY_RANK_UNKNOWN && dims == NULL, "s has no declared shape");
    EXPECT_STATUS(ramify_session_output_shape(s, 1, &dims, &rank), RAMIFY_STATUS_OK);
    CHECK(rank == 2 && dims[0] == -1 && dims[1] == 4, "r's shape");
}

static size_t usable_cpus(int *last) {
    cpu_set_t set;
    CPU_ZERO(&set);
    size_t n = 0;
    *last = -1;
    if (sched_getaffinity(0, sizeof set, &set) == 0)
        for (int c = 0; c < CPU_SETSIZE; c++)
            if (CPU_ISSET(c, &set)) {
                n++;
                *last = c;
            }
    return n;
}

static void check_cpus(const char *path) {
    int last = -1;
    size_t usable = usable_cpus(&last);
    CHECK(usable > 0, "the process's CPUs");
    /* cpus beyond the device is bounded, and the bound is visible. */
    RamifySessionOptions *o = NULL;
    EXPECT_STATUS(ramify_session_options_create(&o), RAMIFY_STATUS_OK);
    EXPECT_STATUS(ramify_session_options_set_cpus(o, RAMIFY_MAX_CPUS), RAMIFY_STATUS_OK);
    RamifySession *s = load(path, o);
    size_t n = 0, count = 0;
    EXPECT_STATUS(ramify_session_cpu_count(s, &n), RAMIFY_STATUS_OK);
    CHECK(n == usable, "cpus %zu, usable %zu", n, usable);
    EXPECT_STATUS(ramify_session_cpu_set(s, NULL, 0, &count), RAMIFY_STATUS_OK);
    CHECK(count == usable, "cpu set count %zu", count);
    size_t *all = calloc(count, sizeof(size_t));
    EXPECT_STATUS(ramify_session_cpu_set(s, all, count, &count), RAMIFY_STATUS_OK);
    CHECK(count > 0 && all[count - 1] == (size_t)last, "the last usable CPU");
    free(all);
    EXPECT_STATUS(ramify_session_cpu_set(s, NULL, 3, &count), RAMIFY_STATUS_INVALID_ARGUMENT);
    EXPECT_STATUS(ramify_session_cpu_set(s, NULL, 0, NULL), RAMIFY_STATUS_INVALID_ARGUMENT);
    EXPECT_STATUS(ramify_session_cpu_count(NULL, &n), RAMIFY_STATUS_INVALID_ARGUMENT);
    EXPECT_STATUS(ramify_session_cpu_count(s, NULL), RAMIFY_STATUS_INVALID_ARGUMENT);
    ramify_session_destroy(s);
    ramify_session_options_destroy(o);

    /* A CPU set: one CPU (an ordinary C array of size_t, no cast). */
    size_t one[1] = {(size_t)last};
    EXPECT_STATUS(ramify_session_options_create(&o), RAMIFY_STATUS_OK);
    EXPECT_STATUS(ramify_session_options_set_cpu_set(o, one, 1), RAMIFY_STATUS_OK);
    s = load(path, o);
    size_t got[4] = {99, 99, 99, 99};
    EXPECT_STATUS(ramify_session_cpu_count(s, &n), RAMIFY_STATUS_OK);
    EXPECT_STATUS(ramify_session_cpu_set(s, got, 4, &count), RAMIFY_STATUS_OK);
    CHECK(n == 1 && count == 1 && got[0] == (size_t)last && got[1] == 99, "the CPU set");
    float x[4] = {1, 2, 3, 4};
    int64_t shape[2] = {1, 4};
    RamifyInput in = {"x", x, sizeof x, RAMIFY_ELEMENT_TYPE_FLOAT, shape, 2};
    RamifyTensor *outs[3] = {NULL, NULL, NULL};
    EXPECT_STATUS(ramify_session_run(s, &in, 1, outs, 3), RAMIFY_STATUS_OK);
    for (int i = 0; i < 3; i++) ramify_tensor_release(outs[i]);
    ramify_session_destroy(s);
    /* Bad sets: a CPU the process may not use, NULL with a count. */
    size_t bad[1] = {100000};
    EXPECT_STATUS(ramify_session_options_set_cpu_set(o, bad, 1), RAMIFY_STATUS_OK);
    RamifySession *none = NULL;
    EXPECT_STATUS(ramify_session_create_from_file(path, o, &none), RAMIFY_STATUS_INVALID_ARGUMENT);
    CHECK(none == NULL && strstr(ramify_last_error(), "100000") != NULL, "the bad CPU is named");
    EXPECT_STATUS(ramify_session_options_set_cpu_set(o, NULL, 1), RAMIFY_STATUS_INVALID_ARGUMENT);
    EXPECT_STATUS(ramify_session_options_set_cpu_set(NULL, one, 1), RAMIFY_STATUS_INVALID_ARGUMENT);
    EXPECT_STATUS(ramify_session_options_set_cpu_set(o, NULL, 0), RAMIFY_STATUS_OK); /* back to all */
    ramify_session_options_destroy(o);
}

static void check_tensor_create(void) {
    RamifyTensor *t = (RamifyTensor *)&failures;
    int64_t shape[2] = {2, 4};
    int64_t negative[2] = {2, -4};
    int64_t huge[3] = {1 << 20, 1 << 20, 1 << 20};
    EXPECT_STATUS(ramify_tensor_create(RAMIFY_ELEMENT_TYPE_STRING, shape, 2, &t), RAMIFY_STATUS_UNSUPPORTED);
    CHECK(t == NULL, "out cleared after a failure");
    EXPECT_STATUS(ramify_tensor_create(42, shape, 2, &t), RAMIFY_STATUS_INVALID_ARGUMENT);
    EXPECT_STATUS(ramify_tensor_create(RAMIFY_ELEMENT_TYPE_FLOAT, negative, 2, &t), RAMIFY_STATUS_INVALID_ARGUMENT);
    EXPECT_STATUS(ramify_tensor_create(RAMIFY_ELEMENT_TYPE_FLOAT, huge, 3, &t), RAMIFY_STATUS_MEMORY_LIMIT);
    EXPECT_STATUS(ramify_tensor_create(RAMIFY_ELEMENT_TYPE_FLOAT, NULL, 2, &t), RAMIFY_STATUS_INVALID_ARGUMENT);
    EXPECT_STATUS(ramify_tensor_create(RAMIFY_ELEMENT_TYPE_FLOAT, shape, 2, NULL), RAMIFY_STATUS_INVALID_ARGUMENT);
    EXPECT_STATUS(ramify_tensor_create(RAMIFY_ELEMENT_TYPE_INT64, NULL, 0, &t), RAMIFY_STATUS_OK); /* a scalar */
    void *p = NULL;
    EXPECT_STATUS(ramify_tensor_mutable_data(t, &p), RAMIFY_STATUS_OK);
    CHECK(p && *(int64_t *)p == 0, "a zeroed scalar");
    EXPECT_STATUS(ramify_tensor_mutable_data(t, NULL), RAMIFY_STATUS_INVALID_ARGUMENT);
    EXPECT_STATUS(ramify_tensor_mutable_data(NULL, &p), RAMIFY_STATUS_INVALID_ARGUMENT);
    ramify_tensor_release(t);
}

static void check_binding(RamifySession *s) {
    /* The input tensor, created once; frames are written into it in place. */
    RamifyTensor *x = NULL;
    int64_t shape[2] = {2, 4};
    EXPECT_STATUS(ramify_tensor_create(RAMIFY_ELEMENT_TYPE_FLOAT, shape, 2, &x), RAMIFY_STATUS_OK);
    float *frame = NULL;
    EXPECT_STATUS(ramify_tensor_mutable_data(x, (void **)&frame), RAMIFY_STATUS_OK);
    if (!x || !frame) return;

    RamifyBinding *b = NULL;
    EXPECT_STATUS(ramify_binding_create(&b), RAMIFY_STATUS_OK);
    char input_name[] = "x"; /* a plain char array is accepted as it is */
    EXPECT_STATUS(ramify_binding_bind_input(b, input_name, x), RAMIFY_STATUS_OK);
    float y[6 + 2];
    EXPECT_STATUS(ramify_binding_bind_output(b, "y", y, sizeof y), RAMIFY_STATUS_OK);
    EXPECT_STATUS(ramify_binding_select_output(b, "r"), RAMIFY_STATUS_OK);

    for (int f = 0; f < 3; f++) {
        for (int i = 0; i < 8; i++) frame[i] = (float)((i * 5 + f * 3) % 9) * 0.5f - 2.0f;
        for (int i = 0; i < 8; i++) y[i] = -777.0f;
        EXPECT_STATUS(ramify_session_run_binding(s, b), RAMIFY_STATUS_OK);
        int ok = 1;
        for (int r = 0; r < 2; r++)
            for (int c = 0; c < 3; c++) ok &= close_to(y[r * 3 + c], y_of(frame, r, c));
        CHECK(ok, "frame %d: y written into the caller's buffer", f);
        CHECK(y[6] == -777.0f && y[7] == -777.0f, "bytes past the output are kept");
        RamifyTensor *r = NULL;
        EXPECT_STATUS(ramify_binding_output(b, "r", &r), RAMIFY_STATUS_OK);
        const float *rv = NULL;
        const int64_t *dims = NULL;
        size_t rank = 0;
        EXPECT_STATUS(ramify_tensor_data(r, (const void **)&rv), RAMIFY_STATUS_OK);
        EXPECT_STATUS(ramify_tensor_shape(r, &dims, &rank), RAMIFY_STATUS_OK);
        CHECK(rank == 2 && dims[0] == 2 && dims[1] == 4, "r's shape");
        for (int i = 0; rv && i < 8; i++) CHECK(rv[i] == (frame[i] > 0 ? frame[i] : 0), "relu[%d]", i);
        /* The returned tensor shares its data with the binding: not writable. */
        void *w = NULL;
        EXPECT_STATUS(ramify_tensor_mutable_data(r, &w), RAMIFY_STATUS_INVALID_ARGUMENT);
        ramify_tensor_release(r);
        EXPECT_STATUS(ramify_binding_output_shape(b, "y", &dims, &rank), RAMIFY_STATUS_OK);
        CHECK(rank == 2 && dims[0] == 2 && dims[1] == 3, "y's shape");
        /* The input is not held after the run: writable again. */
        void *again = NULL;
        EXPECT_STATUS(ramify_tensor_mutable_data(x, &again), RAMIFY_STATUS_OK);
        CHECK(again == frame, "the same buffer, frame after frame");
    }
    RamifyTensor *none = NULL;
    EXPECT_STATUS(ramify_binding_output(b, "y", &none), RAMIFY_STATUS_INVALID_ARGUMENT); /* in its buffer */
    EXPECT_STATUS(ramify_binding_output(b, "s", &none), RAMIFY_STATUS_INVALID_ARGUMENT); /* not chosen */
    CHECK(none == NULL, "no tensor after a refusal");

    /* A buffer too small: refused before running, nothing written, the shape told. */
    float small[5];
    for (int i = 0; i < 5; i++) small[i] = -1.0f;
    EXPECT_STATUS(ramify_binding_bind_output(b, "y", small, sizeof small), RAMIFY_STATUS_OK);
    EXPECT_STATUS(ramify_session_run_binding(s, b), RAMIFY_STATUS_BUFFER_TOO_SMALL);
    CHECK(strstr(ramify_last_error(), "needs 24 bytes") != NULL, "the message gives the size needed");
    int untouched = 1;
    for (int i = 0; i < 5; i++) untouched &= small[i] == -1.0f;
    CHECK(untouched, "a too-small buffer is not written");
    const int64_t *dims = NULL;
    size_t rank = 0;
    EXPECT_STATUS(ramify_binding_output_shape(b, "y", &dims, &rank), RAMIFY_STATUS_OK);
    CHECK(rank == 2 && dims[0] == 2 && dims[1] == 3, "the shape the buffer must hold");
    CHECK(strcmp(ramify_status_name(RAMIFY_STATUS_BUFFER_TOO_SMALL), "RAMIFY_STATUS_BUFFER_TOO_SMALL") == 0,
          "status name");

    /* Overlapping buffers, unknown outputs, missing inputs. */
    EXPECT_STATUS(ramify_binding_bind_output(b, "y", y, sizeof y), RAMIFY_STATUS_OK);
    EXPECT_STATUS(ramify_binding_bind_output(b, "r", y + 4, 32), RAMIFY_STATUS_INVALID_ARGUMENT);
    EXPECT_STATUS(ramify_binding_select_output(b, "nope"), RAMIFY_STATUS_OK);
    EXPECT_STATUS(ramify_session_run_binding(s, b), RAMIFY_STATUS_INVALID_INPUT);
    CHECK(strstr(ramify_last_error(), "unknown output \"nope\"") != NULL, "unknown output message");
    EXPECT_STATUS(ramify_binding_clear(b), RAMIFY_STATUS_OK);
    EXPECT_STATUS(ramify_session_run_binding(s, b), RAMIFY_STATUS_INVALID_INPUT);
    CHECK(strstr(ramify_last_error(), "missing input \"x\"") != NULL, "missing input message");

    /* Nothing chosen: every output comes back as a tensor. */
    EXPECT_STATUS(ramify_binding_bind_input(b, "x", x), RAMIFY_STATUS_OK);
    EXPECT_STATUS(ramify_session_run_binding(s, b), RAMIFY_STATUS_OK);
    const char *names[3] = {"y", "r", "s"};
    for (int i = 0; i < 3; i++) {
        RamifyTensor *t = NULL;
        EXPECT_STATUS(ramify_binding_output(b, names[i], &t), RAMIFY_STATUS_OK);
        size_t count = 0;
        EXPECT_STATUS(ramify_tensor_element_count(t, &count), RAMIFY_STATUS_OK);
        CHECK(count == (i == 0 ? 6u : 8u), "%s has %zu elements", names[i], count);
        ramify_tensor_release(t);
    }

    /* NULL-safety. */
    EXPECT_STATUS(ramify_binding_create(NULL), RAMIFY_STATUS_INVALID_ARGUMENT);
    EXPECT_STATUS(ramify_binding_bind_input(NULL, "x", x), RAMIFY_STATUS_INVALID_ARGUMENT);
    EXPECT_STATUS(ramify_binding_bind_input(b, NULL, x), RAMIFY_STATUS_INVALID_ARGUMENT);
    EXPECT_STATUS(ramify_binding_bind_input(b, "x", NULL), RAMIFY_STATUS_INVALID_ARGUMENT);
    EXPECT_STATUS(ramify_binding_bind_output(NULL, "y", y, sizeof y), RAMIFY_STATUS_INVALID_ARGUMENT);
    EXPECT_STATUS(ramify_binding_bind_output(b, NULL, y, sizeof y), RAMIFY_STATUS_INVALID_ARGUMENT);
    EXPECT_STATUS(ramify_binding_bind_output(b, "y", NULL, 8), RAMIFY_STATUS_INVALID_ARGUMENT);
    EXPECT_STATUS(ramify_binding_select_output(NULL, "y"), RAMIFY_STATUS_INVALID_ARGUMENT);
    EXPECT_STATUS(ramify_binding_select_output(b, NULL), RAMIFY_STATUS_INVALID_ARGUMENT);
    EXPECT_STATUS(ramify_binding_clear(NULL), RAMIFY_STATUS_INVALID_ARGUMENT);
    EXPECT_STATUS(ramify_session_run_binding(NULL, b), RAMIFY_STATUS_INVALID_ARGUMENT);
    EXPECT_STATUS(ramify_session_run_binding(s, NULL), RAMIFY_STATUS_INVALID_ARGUMENT);
    EXPECT_STATUS(ramify_binding_output(NULL, "y", &none), RAMIFY_STATUS_INVALID_ARGUMENT);
    EXPECT_STATUS(ramify_binding_output(b, NULL, &none), RAMIFY_STATUS_INVALID_ARGUMENT);
    EXPECT_STATUS(ramify_binding_output(b, "y", NULL), RAMIFY_STATUS_INVALID_ARGUMENT);
    EXPECT_STATUS(ramify_binding_output_shape(NULL, "y", &dims, &rank), RAMIFY_STATUS_INVALID_ARGUMENT);
    EXPECT_STATUS(ramify_binding_output_shape(b, "y", NULL, &rank), RAMIFY_STATUS_INVALID_ARGUMENT);
    EXPECT_STATUS(ramify_binding_output_shape(b, "y", &dims, NULL), RAMIFY_STATUS_INVALID_ARGUMENT);
    ramify_binding_destroy(b);
    ramify_binding_destroy(NULL);
    ramify_tensor_release(x);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s THREE_HEADS_MODEL\n", argv[0]);
        return 2;
    }
    RamifySession *s = load(argv[1], NULL);
    if (!s) return 1;
    check_metadata(s);
    check_dimensions(s);
    check_tensor_create();
    check_binding(s);
    ramify_session_destroy(s);
    check_cpus(argv[1]);
    if (failures) {
        fprintf(stderr, "binding_ramify: %d failure(s)\n", failures);
        return 1;
    }
    printf("binding_ramify: all checks passed\n");
    return 0;
}
