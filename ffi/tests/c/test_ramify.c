/*
 * The C API's own test: built and run by ffi/tests/c_program.rs (also under
 * valgrind). Exits 0 when every check passes, 1 otherwise.
 *
 * usage: test_ramify TINY_MODEL [EXAMPLE_MODEL INPUT_F32 EXPECTED_F32]
 *   TINY_MODEL   x[N,4] -> MatMul(W) -> Add(b) -> y[N,3] (ffi/tests/common/model.rs)
 *   EXAMPLE_MODEL, INPUT_F32, EXPECTED_F32: models/inception_mini.onnx and raw
 *   little-endian float files of its reference input and output.
 * env RAMIFY_TEST_ITERS: runs per thread (default 20).
 */
#include "check.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int iters(void) {
    const char *s = getenv("RAMIFY_TEST_ITERS");
    int n = s ? atoi(s) : 20;
    return n > 0 ? n : 1;
}

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

/* Runs the tiny model on `rows` rows and checks y = x.W + b. Returns 0 on success. */
static int run_tiny(RamifySession *s, int rows, float seed) {
    int bad = 0;
    float *x = malloc(sizeof(float) * 4 * rows);
    for (int i = 0; i < 4 * rows; i++) x[i] = (float)((i * 7 + (int)seed) % 11) * 0.25f - 1.0f;
    int64_t shape[2] = {rows, 4};
    RamifyInput v = {"x", x, sizeof(float) * 4 * rows, RAMIFY_ELEMENT_TYPE_FLOAT, shape, 2};
    RamifyTensor *out[1] = {NULL};
    RamifyStatus st = ramify_session_run(s, &v, 1, out, 1);
    if (st != RAMIFY_STATUS_OK) {
        fprintf(stderr, "FAIL run_tiny: %s: %s\n", ramify_status_name(st), ramify_last_error());
        free(x);
        return 1;
    }
    int32_t type = -1;
    const int64_t *dims = NULL;
    size_t rank = 0, bytes = 0, count = 0;
    const void *data = NULL;
    bad |= ramify_tensor_element_type(out[0], &type) != RAMIFY_STATUS_OK || type != RAMIFY_ELEMENT_TYPE_FLOAT;
    bad |= ramify_tensor_shape(out[0], &dims, &rank) != RAMIFY_STATUS_OK || rank != 2 || dims[0] != rows || dims[1] != 3;
    bad |= ramify_tensor_byte_size(out[0], &bytes) != RAMIFY_STATUS_OK || bytes != sizeof(float) * 3 * rows;
    bad |= ramify_tensor_element_count(out[0], &count) != RAMIFY_STATUS_OK || count != (size_t)(3 * rows);
    bad |= ramify_tensor_data(out[0], &data) != RAMIFY_STATUS_OK || data == NULL;
    if (!bad) {
        const float *y = data;
        for (int r = 0; r < rows; r++)
            for (int c = 0; c < 3; c++) {
                float want = B[c];
                for (int k = 0; k < 4; k++) want += x[r * 4 + k] * W[k * 3 + c];
                if (fabsf(y[r * 3 + c] - want) > 1e-4f) {
                    fprintf(stderr, "FAIL run_tiny: y[%d,%d] = %g, expected %g\n", r, c, y[r * 3 + c], want);
                    bad = 1;
                }
            }
    } else {
        fprintf(stderr, "FAIL run_tiny: the output tensor's accessors disagree\n");
    }
    ramify_tensor_release(out[0]);
    free(x);
    return bad;
}

struct job {
    RamifySession *session;
    int id;
    int failed;
    const float *input;
    const float *expected;
    size_t in_count, out_count;
};

static void *tiny_thread(void *arg) {
    struct job *j = arg;
    for (int i = 0; i < iters(); i++) j->failed |= run_tiny(j->session, 1 + (i + j->id) % 5, (float)(i * 3 + j->id));
    return NULL;
}

static void check_queries(RamifySession *s) {
    size_t n = 0;
    const char *name = NULL;
    int32_t type = -1;
    const int64_t *dims = NULL;
    size_t rank = 0;
    EXPECT_STATUS(ramify_session_input_count(s, &n), RAMIFY_STATUS_OK);
    CHECK(n == 1, "input count %zu", n);
    EXPECT_STATUS(ramify_session_output_count(s, &n), RAMIFY_STATUS_OK);
    CHECK(n == 1, "output count %zu", n);
    EXPECT_STATUS(ramify_session_input_name(s, 0, &name), RAMIFY_STATUS_OK);
    CHECK(name && strcmp(name, "x") == 0, "input name %s", name ? name : "(null)");
    EXPECT_STATUS(ramify_session_output_name(s, 0, &name), RAMIFY_STATUS_OK);
    CHECK(name && strcmp(name, "y") == 0, "output name %s", name ? name : "(null)");
    EXPECT_STATUS(ramify_session_input_element_type(s, 0, &type), RAMIFY_STATUS_OK);
    CHECK(type == RAMIFY_ELEMENT_TYPE_FLOAT, "input type %d", type);
    EXPECT_STATUS(ramify_session_output_element_type(s, 0, &type), RAMIFY_STATUS_OK);
    CHECK(type == RAMIFY_ELEMENT_TYPE_FLOAT, "output type %d", type);
    EXPECT_STATUS(ramify_session_input_shape(s, 0, &dims, &rank), RAMIFY_STATUS_OK);
    CHECK(rank == 2 && dims[0] == -1 && dims[1] == 4, "input shape");
    EXPECT_STATUS(ramify_session_output_shape(s, 0, &dims, &rank), RAMIFY_STATUS_OK);
    CHECK(rank == 2 && dims[0] == -1 && dims[1] == 3, "output shape");
}

static void check_errors(RamifySession *s, const char *tiny_path) {
    RamifySession *bad = (RamifySession *)&failures; /* must be overwritten with NULL */
    EXPECT_STATUS(ramify_session_create_from_file("/nonexistent/dir/model.onnx", NULL, &bad), RAMIFY_STATUS_IO_ERROR);
    CHECK(bad == NULL, "out not cleared");
    CHECK(strstr(ramify_last_error(), "/nonexistent/dir/model.onnx") != NULL, "message names the file");
    const unsigned char garbage[4] = {0xff, 0xff, 0xff, 0x07};
    EXPECT_STATUS(ramify_session_create_from_memory(garbage, sizeof garbage, NULL, &bad), RAMIFY_STATUS_INVALID_MODEL);
    CHECK(strstr(ramify_last_error(), "not an ONNX model") != NULL, "message says what the bytes are not");
    CHECK(strstr(ramify_last_error(), "memory buffer of 4 bytes") != NULL, "message names the memory buffer");
    CHECK(strstr(ramify_last_error(), "file") == NULL, "no file is involved");
    /* A directory is a file that cannot be read; zero bytes are an empty model. */
    EXPECT_STATUS(ramify_session_create_from_file("/tmp", NULL, &bad), RAMIFY_STATUS_IO_ERROR);
    CHECK(strstr(ramify_last_error(), "directory") != NULL, "message says it is a directory");
    EXPECT_STATUS(ramify_session_create_from_memory(garbage, 0, NULL, &bad), RAMIFY_STATUS_INVALID_MODEL);
    CHECK(strstr(ramify_last_error(), "the model is empty") != NULL, "message says the model is empty");
    EXPECT_STATUS(ramify_session_create_from_file(NULL, NULL, &bad), RAMIFY_STATUS_INVALID_ARGUMENT);
    EXPECT_STATUS(ramify_session_create_from_file(tiny_path, NULL, NULL), RAMIFY_STATUS_INVALID_ARGUMENT);
    EXPECT_STATUS(ramify_session_create_from_memory(NULL, 10, NULL, &bad), RAMIFY_STATUS_INVALID_ARGUMENT);

    float x[8] = {0};
    int64_t shape[2] = {2, 4};
    RamifyInput v = {"x", x, sizeof x, RAMIFY_ELEMENT_TYPE_FLOAT, shape, 2};
    RamifyInput wrong = {"input", x, sizeof x, RAMIFY_ELEMENT_TYPE_FLOAT, shape, 2};
    RamifyTensor *out[1] = {NULL};
    /* Wrong input name. */
    EXPECT_STATUS(ramify_session_run(s, &wrong, 1, out, 1), RAMIFY_STATUS_INVALID_INPUT);
    CHECK(strstr(ramify_last_error(), "unknown input") != NULL, "unknown input message");
    CHECK(out[0] == NULL, "output set after a failure");
    /* Wrong shape: [1, 8] against [N, 4]. */
    int64_t wrong_shape[2] = {1, 8};
    RamifyInput vs = {"x", x, sizeof x, RAMIFY_ELEMENT_TYPE_FLOAT, wrong_shape, 2};
    EXPECT_STATUS(ramify_session_run(s, &vs, 1, out, 1), RAMIFY_STATUS_INVALID_INPUT);
    CHECK(strstr(ramify_last_error(), "shape") != NULL, "shape message");
    /* Wrong element type, byte size, element type code. */
    RamifyInput vt = {"x", x, sizeof x, RAMIFY_ELEMENT_TYPE_INT32, shape, 2};
    EXPECT_STATUS(ramify_session_run(s, &vt, 1, out, 1), RAMIFY_STATUS_INVALID_INPUT);
    RamifyInput vb = {"x", x, sizeof x - 1, RAMIFY_ELEMENT_TYPE_FLOAT, shape, 2};
    EXPECT_STATUS(ramify_session_run(s, &vb, 1, out, 1), RAMIFY_STATUS_INVALID_ARGUMENT);
    RamifyInput vc = {"x", x, sizeof x, 42, shape, 2};
    EXPECT_STATUS(ramify_session_run(s, &vc, 1, out, 1), RAMIFY_STATUS_INVALID_ARGUMENT);
    /* Missing input, miscounted outputs. */
    EXPECT_STATUS(ramify_session_run(s, NULL, 0, out, 1), RAMIFY_STATUS_INVALID_INPUT);
    EXPECT_STATUS(ramify_session_run(s, &v, 1, out, 2), RAMIFY_STATUS_INVALID_ARGUMENT);
    /* NULL arguments. */
    EXPECT_STATUS(ramify_session_run(NULL, &v, 1, out, 1), RAMIFY_STATUS_INVALID_ARGUMENT);
    EXPECT_STATUS(ramify_session_run(s, NULL, 1, out, 1), RAMIFY_STATUS_INVALID_ARGUMENT);
    EXPECT_STATUS(ramify_session_run(s, &v, 1, NULL, 1), RAMIFY_STATUS_INVALID_ARGUMENT);
    RamifyInput unnamed = {NULL, x, sizeof x, RAMIFY_ELEMENT_TYPE_FLOAT, shape, 2};
    EXPECT_STATUS(ramify_session_run(s, &unnamed, 1, out, 1), RAMIFY_STATUS_INVALID_ARGUMENT);
    RamifyInput vn = {"x", NULL, sizeof x, RAMIFY_ELEMENT_TYPE_FLOAT, shape, 2};
    EXPECT_STATUS(ramify_session_run(s, &vn, 1, out, 1), RAMIFY_STATUS_INVALID_ARGUMENT);
    RamifyInput vns = {"x", x, sizeof x, RAMIFY_ELEMENT_TYPE_FLOAT, NULL, 2};
    EXPECT_STATUS(ramify_session_run(s, &vns, 1, out, 1), RAMIFY_STATUS_INVALID_ARGUMENT);
    size_t n = 0;
    const char *name = NULL;
    EXPECT_STATUS(ramify_session_input_count(NULL, &n), RAMIFY_STATUS_INVALID_ARGUMENT);
    EXPECT_STATUS(ramify_session_input_count(s, NULL), RAMIFY_STATUS_INVALID_ARGUMENT);
    EXPECT_STATUS(ramify_session_input_name(s, 1, &name), RAMIFY_STATUS_INVALID_ARGUMENT);
    EXPECT_STATUS(ramify_session_output_name(s, 99, &name), RAMIFY_STATUS_INVALID_ARGUMENT);
    EXPECT_STATUS(ramify_tensor_rank(NULL, &n), RAMIFY_STATUS_INVALID_ARGUMENT);
    EXPECT_STATUS(ramify_tensor_data(NULL, NULL), RAMIFY_STATUS_INVALID_ARGUMENT);
    /* Host state. */
    EXPECT_STATUS(ramify_session_push_host_state(s, 0.5, 0.8, 0.0), RAMIFY_STATUS_OK);
    EXPECT_STATUS(ramify_session_push_host_state(s, 0.5, -1.0, -1.0), RAMIFY_STATUS_OK);
    EXPECT_STATUS(ramify_session_push_host_state(s, 1.5, -1.0, -1.0), RAMIFY_STATUS_INVALID_ARGUMENT);
    EXPECT_STATUS(ramify_session_push_host_state(NULL, 0.5, 0.5, 0.5), RAMIFY_STATUS_INVALID_ARGUMENT);
    /* Options. */
    RamifySessionOptions *o = NULL;
    EXPECT_STATUS(ramify_session_options_create(NULL), RAMIFY_STATUS_INVALID_ARGUMENT);
    EXPECT_STATUS(ramify_session_options_create(&o), RAMIFY_STATUS_OK);
    EXPECT_STATUS(ramify_session_options_set_cpus(NULL, 2), RAMIFY_STATUS_INVALID_ARGUMENT);
    EXPECT_STATUS(ramify_session_options_set_cpus(o, 0), RAMIFY_STATUS_INVALID_ARGUMENT);
    EXPECT_STATUS(ramify_session_options_set_mode(o, 7), RAMIFY_STATUS_INVALID_ARGUMENT);
    EXPECT_STATUS(ramify_session_options_set_theta1(o, 2.0), RAMIFY_STATUS_INVALID_ARGUMENT);
    EXPECT_STATUS(ramify_session_options_set_load_sources(o, 0), RAMIFY_STATUS_INVALID_ARGUMENT);
    /* θ2 > θ1 is refused when the session is created. */
    EXPECT_STATUS(ramify_session_options_set_theta1(o, 0.3), RAMIFY_STATUS_OK);
    EXPECT_STATUS(ramify_session_options_set_theta2(o, 0.6), RAMIFY_STATUS_OK);
    EXPECT_STATUS(ramify_session_create_from_file(tiny_path, o, &bad), RAMIFY_STATUS_INVALID_ARGUMENT);
    ramify_session_options_destroy(o);
    /* The memory budget: a run that needs more fails with its own status and
       message; the same session then runs a smaller input. */
    EXPECT_STATUS(ramify_session_options_set_memory_limit(NULL, 4096), RAMIFY_STATUS_INVALID_ARGUMENT);
    EXPECT_STATUS(ramify_session_options_create(&o), RAMIFY_STATUS_OK);
    EXPECT_STATUS(ramify_session_options_set_memory_limit(o, 0), RAMIFY_STATUS_INVALID_ARGUMENT);
    EXPECT_STATUS(ramify_session_options_set_memory_limit(o, 4096), RAMIFY_STATUS_OK);
    RamifySession *small = NULL;
    EXPECT_STATUS(ramify_session_create_from_file(tiny_path, o, &small), RAMIFY_STATUS_OK);
    ramify_session_options_destroy(o);
    if (small) {
        enum { ROWS = 1000 };
        float *big = calloc(4 * ROWS, sizeof(float));
        int64_t big_shape[2] = {ROWS, 4};
        RamifyInput vb = {"x", big, sizeof(float) * 4 * ROWS, RAMIFY_ELEMENT_TYPE_FLOAT, big_shape, 2};
        RamifyTensor *y[1] = {NULL};
        EXPECT_STATUS(ramify_session_run(small, &vb, 1, y, 1), RAMIFY_STATUS_MEMORY_LIMIT);
        CHECK(strstr(ramify_last_error(), "memory limit") != NULL, "memory-limit message");
        CHECK(y[0] == NULL, "output set after a refused run");
        CHECK(strcmp(ramify_status_name(RAMIFY_STATUS_MEMORY_LIMIT), "RAMIFY_STATUS_MEMORY_LIMIT") == 0, "status name");
        failures += run_tiny(small, 2, 3.0f);
        free(big);
    }
    ramify_session_destroy(small);
    /* Every destroy/release accepts NULL. */
    ramify_session_destroy(NULL);
    ramify_session_options_destroy(NULL);
    ramify_tensor_release(NULL);
}

static void *example_thread(void *arg) {
    struct job *j = arg;
    int64_t shape[4] = {1, 3, 96, 96};
    RamifyInput v = {"input", j->input, sizeof(float) * j->in_count, RAMIFY_ELEMENT_TYPE_FLOAT, shape, 4};
    for (int i = 0; i < 2; i++) {
        RamifyTensor *out[1] = {NULL};
        RamifyStatus st = ramify_session_run(j->session, &v, 1, out, 1);
        if (st != RAMIFY_STATUS_OK) {
            fprintf(stderr, "FAIL example run: %s: %s\n", ramify_status_name(st), ramify_last_error());
            j->failed = 1;
            return NULL;
        }
        const void *data = NULL;
        size_t count = 0;
        if (ramify_tensor_data(out[0], &data) != RAMIFY_STATUS_OK ||
            ramify_tensor_element_count(out[0], &count) != RAMIFY_STATUS_OK || count != j->out_count) {
            fprintf(stderr, "FAIL example output: %zu elements, expected %zu\n", count, j->out_count);
            j->failed = 1;
        } else {
            const float *y = data;
            for (size_t k = 0; k < count; k++)
                if (!(fabsf(y[k] - j->expected[k]) <= 1e-4f)) {
                    fprintf(stderr, "FAIL example logits[%zu] = %g, expected %g\n", k, y[k], j->expected[k]);
                    j->failed = 1;
                    break;
                }
        }
        ramify_tensor_release(out[0]);
    }
    return NULL;
}

static void check_example(const char *model, const char *input_path, const char *expected_path) {
    size_t in_bytes = 0, out_bytes = 0;
    float *input = read_file(input_path, &in_bytes);
    float *expected = read_file(expected_path, &out_bytes);
    CHECK(input && expected, "cannot read %s or %s", input_path, expected_path);
    RamifySessionOptions *o = NULL;
    ramify_session_options_create(&o);
    ramify_session_options_set_cpus(o, 2);
    RamifySession *s = NULL;
    RamifyStatus st = ramify_session_create_from_file(model, o, &s);
    ramify_session_options_destroy(o);
    CHECK(st == RAMIFY_STATUS_OK, "loading %s: %s", model, ramify_status_name(st));
    if (s && input && expected) {
        const char *name = NULL;
        const int64_t *dims = NULL;
        size_t rank = 0;
        EXPECT_STATUS(ramify_session_input_name(s, 0, &name), RAMIFY_STATUS_OK);
        CHECK(name && strcmp(name, "input") == 0, "example input name");
        EXPECT_STATUS(ramify_session_output_name(s, 0, &name), RAMIFY_STATUS_OK);
        CHECK(name && strcmp(name, "logits") == 0, "example output name");
        EXPECT_STATUS(ramify_session_input_shape(s, 0, &dims, &rank), RAMIFY_STATUS_OK);
        CHECK(rank == 4 && dims[1] == 3 && dims[2] == 96 && dims[3] == 96, "example input shape");
        CHECK(in_bytes == sizeof(float) * 3 * 96 * 96 && out_bytes == sizeof(float) * 100, "reference sizes");
        struct job jobs[2];
        pthread_t t[2];
        for (int i = 0; i < 2; i++) {
            jobs[i] = (struct job){s, i, 0, input, expected, in_bytes / sizeof(float), out_bytes / sizeof(float)};
            pthread_create(&t[i], NULL, example_thread, &jobs[i]);
        }
        for (int i = 0; i < 2; i++) {
            pthread_join(t[i], NULL);
            CHECK(!jobs[i].failed, "example thread %d", i);
        }
    }
    ramify_session_destroy(s);
    free(input);
    free(expected);
}

int main(int argc, char **argv) {
    if (argc != 2 && argc != 5) {
        fprintf(stderr, "usage: %s TINY_MODEL [EXAMPLE_MODEL INPUT_F32 EXPECTED_F32]\n", argv[0]);
        return 2;
    }
    char header_version[32];
    snprintf(header_version, sizeof header_version, "%d.%d.%d", RAMIFY_VERSION_MAJOR, RAMIFY_VERSION_MINOR,
             RAMIFY_VERSION_PATCH);
    CHECK(strcmp(ramify_version(), header_version) == 0, "library %s, header %s", ramify_version(), header_version);
    CHECK(strcmp(ramify_last_error(), "") == 0, "an error before any call");

    /* The tiny model, from a file with options and from memory with defaults. */
    RamifySessionOptions *o = NULL;
    EXPECT_STATUS(ramify_session_options_create(&o), RAMIFY_STATUS_OK);
    EXPECT_STATUS(ramify_session_options_set_cpus(o, 2), RAMIFY_STATUS_OK);
    EXPECT_STATUS(ramify_session_options_set_mode(o, RAMIFY_MODE_ADAPTIVE), RAMIFY_STATUS_OK);
    EXPECT_STATUS(ramify_session_options_set_theta1(o, 0.8), RAMIFY_STATUS_OK);
    EXPECT_STATUS(ramify_session_options_set_theta2(o, 0.4), RAMIFY_STATUS_OK);
    EXPECT_STATUS(ramify_session_options_set_m1(o, 2), RAMIFY_STATUS_OK);
    EXPECT_STATUS(ramify_session_options_set_m2(o, 1), RAMIFY_STATUS_OK);
    EXPECT_STATUS(ramify_session_options_set_load_sources(o, RAMIFY_LOAD_SYSTEM_CPU | RAMIFY_LOAD_HOST), RAMIFY_STATUS_OK);
    EXPECT_STATUS(ramify_session_options_set_fixed_load(o, 0.1), RAMIFY_STATUS_OK);
    RamifySession *s = NULL;
    EXPECT_STATUS(ramify_session_create_from_file(argv[1], o, &s), RAMIFY_STATUS_OK);
    ramify_session_options_destroy(o);
    if (!s) {
        fprintf(stderr, "FAIL: cannot load %s\n", argv[1]);
        return 1;
    }
    check_queries(s);
    failures += run_tiny(s, 3, 1.0f);

    size_t size = 0;
    void *bytes = read_file(argv[1], &size);
    RamifySession *m = NULL;
    CHECK(bytes != NULL, "cannot read %s", argv[1]);
    EXPECT_STATUS(ramify_session_create_from_memory(bytes, size, NULL, &m), RAMIFY_STATUS_OK);
    free(bytes); /* the session does not keep the buffer */
    if (m) {
        check_queries(m);
        failures += run_tiny(m, 2, 5.0f);
    }
    ramify_session_destroy(m);

    /* Two threads running one session at once. */
    struct job jobs[2];
    pthread_t t[2];
    for (int i = 0; i < 2; i++) {
        jobs[i] = (struct job){s, i, 0, NULL, NULL, 0, 0};
        CHECK(pthread_create(&t[i], NULL, tiny_thread, &jobs[i]) == 0, "pthread_create");
    }
    for (int i = 0; i < 2; i++) {
        pthread_join(t[i], NULL);
        CHECK(!jobs[i].failed, "thread %d", i);
    }

    check_errors(s, argv[1]);
    ramify_session_destroy(s);

    if (argc == 5) check_example(argv[2], argv[3], argv[4]);

    if (failures) {
        fprintf(stderr, "test_ramify: %d failure(s)\n", failures);
        return 1;
    }
    printf("test_ramify: all checks passed\n");
    return 0;
}
