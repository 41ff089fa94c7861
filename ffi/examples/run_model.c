/*
 * A minimal use of the ramify C API: load a model, describe its first input,
 * run it once on zeros (symbolic dimensions taken as 1), print the outputs'
 * shapes and first values.
 *
 *   cargo build -p ramify-ffi --release
 *   cc -I ffi/include ffi/examples/run_model.c target/release/libramify_ffi.a \
 *      -lpthread -ldl -lm -o run_model
 *   ./run_model models/inception_mini.onnx
 */
#include "ramify.h"

#include <stdio.h>
#include <stdlib.h>

static int fail(const char *what, RamifyStatus s) {
    fprintf(stderr, "%s: %s: %s\n", what, ramify_status_name(s), ramify_last_error());
    return 1;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s MODEL.onnx\n", argv[0]);
        return 2;
    }
    printf("ramify %s (header %d.%d.%d)\n", ramify_version(), RAMIFY_VERSION_MAJOR, RAMIFY_VERSION_MINOR,
           RAMIFY_VERSION_PATCH);

    RamifySessionOptions *options = NULL;
    RamifySession *session = NULL;
    RamifyStatus s = ramify_session_options_create(&options);
    if (s != RAMIFY_STATUS_OK) return fail("options", s);
    ramify_session_options_set_cpus(options, 4); /* bounded by the device's CPUs */
    s = ramify_session_create_from_file(argv[1], options, &session);
    ramify_session_options_destroy(options);
    if (s != RAMIFY_STATUS_OK) return fail("load", s);
    size_t cpus = 0;
    RamifyModelMetadata meta;
    ramify_session_cpu_count(session, &cpus);
    ramify_session_metadata(session, &meta);
    printf("%s: producer \"%s\", model version %lld, on %zu CPU(s)\n", argv[1], meta.producer_name,
           (long long)meta.model_version, cpus);

    size_t n_inputs = 0, n_outputs = 0;
    ramify_session_input_count(session, &n_inputs);
    ramify_session_output_count(session, &n_outputs);
    if (n_inputs != 1) {
        fprintf(stderr, "this example feeds models with one float input\n");
        ramify_session_destroy(session);
        return 1;
    }
    const char *name = NULL;
    const int64_t *declared = NULL;
    size_t rank = 0;
    ramify_session_input_name(session, 0, &name);
    s = ramify_session_input_shape(session, 0, &declared, &rank);
    if (s != RAMIFY_STATUS_OK || rank == RAMIFY_RANK_UNKNOWN || rank > 8) {
        ramify_session_destroy(session);
        return fail("input shape", s);
    }
    int64_t shape[8];
    size_t count = 1;
    for (size_t i = 0; i < rank; i++) {
        const char *dim_name = NULL;
        ramify_session_input_dim_name(session, 0, i, &dim_name);
        if (dim_name) printf("input dimension %zu is free (\"%s\"): using 1\n", i, dim_name);
        shape[i] = declared[i] < 0 ? 1 : declared[i];
        count *= (size_t)shape[i];
    }
    float *data = calloc(count ? count : 1, sizeof(float));
    RamifyInput input = {name, data, count * sizeof(float), RAMIFY_ELEMENT_TYPE_FLOAT, shape, rank};
    RamifyTensor **outputs = calloc(n_outputs, sizeof(RamifyTensor *));

    s = ramify_session_run(session, &input, 1, outputs, n_outputs);
    free(data);
    if (s == RAMIFY_STATUS_OK) {
        for (size_t i = 0; i < n_outputs; i++) {
            const char *out_name = NULL;
            const int64_t *dims = NULL;
            size_t out_rank = 0, elements = 0;
            const void *values = NULL;
            int32_t type = 0;
            ramify_session_output_name(session, i, &out_name);
            ramify_tensor_shape(outputs[i], &dims, &out_rank);
            ramify_tensor_element_count(outputs[i], &elements);
            ramify_tensor_element_type(outputs[i], &type);
            ramify_tensor_data(outputs[i], &values);
            printf("%s: [", out_name);
            for (size_t d = 0; d < out_rank; d++) printf(d ? ", %lld" : "%lld", (long long)dims[d]);
            printf("]");
            if (type == RAMIFY_ELEMENT_TYPE_FLOAT)
                for (size_t k = 0; k < elements && k < 5; k++) printf(" %g", ((const float *)values)[k]);
            printf("\n");
            ramify_tensor_release(outputs[i]);
        }
    } else {
        fail("run", s);
    }
    free(outputs);
    ramify_session_destroy(session);
    return s == RAMIFY_STATUS_OK ? 0 : 1;
}
