/*
 * A camera-style loop with the ramify C API: the input tensor is created
 * once and each frame is written into it in place (no copy into ramify),
 * the output lands in the app's own buffer (no allocation per frame), and
 * only the output the app needs is computed. Runs three synthetic frames
 * through a classifier with one [1, 3, H, W] float input.
 *
 *   cargo build -p ramify-ffi --release
 *   cc -I ffi/include ffi/examples/camera_loop.c target/release/libramify_ffi.a \
 *      -lpthread -ldl -lm -o camera_loop
 *   ./camera_loop models/inception_mini.onnx
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
    RamifySession *session = NULL;
    RamifyStatus s = ramify_session_create_from_file(argv[1], NULL, &session);
    if (s != RAMIFY_STATUS_OK) return fail("load", s);

    /* What to feed and what to read: the first input and output. */
    const char *input_name = NULL, *output_name = NULL;
    const int64_t *in_dims = NULL, *out_dims = NULL;
    size_t in_rank = 0, out_rank = 0;
    ramify_session_input_name(session, 0, &input_name);
    ramify_session_output_name(session, 0, &output_name);
    ramify_session_input_shape(session, 0, &in_dims, &in_rank);
    ramify_session_output_shape(session, 0, &out_dims, &out_rank);
    if (in_rank != 4 || out_rank == RAMIFY_RANK_UNKNOWN) {
        fprintf(stderr, "this example wants a [1, 3, H, W] input and a declared output shape\n");
        ramify_session_destroy(session);
        return 1;
    }
    int64_t shape[4] = {1, 3, in_dims[2] < 0 ? 224 : in_dims[2], in_dims[3] < 0 ? 224 : in_dims[3]};
    size_t classes = 1;
    for (size_t i = 0; i < out_rank; i++) classes *= out_dims[i] < 0 ? 1 : (size_t)out_dims[i];

    /* Created once; written frame after frame. */
    RamifyTensor *frame = NULL;
    s = ramify_tensor_create(RAMIFY_ELEMENT_TYPE_FLOAT, shape, 4, &frame);
    if (s != RAMIFY_STATUS_OK) return fail("input tensor", s);
    float *pixels = NULL;
    ramify_tensor_mutable_data(frame, (void **)&pixels);
    float *scores = malloc(classes * sizeof(float));

    RamifyBinding *binding = NULL;
    ramify_binding_create(&binding);
    ramify_binding_bind_input(binding, input_name, frame);
    ramify_binding_bind_output(binding, output_name, scores, classes * sizeof(float));

    size_t n = (size_t)(shape[1] * shape[2] * shape[3]);
    for (int f = 1; f <= 3 && s == RAMIFY_STATUS_OK; f++) {
        /* The "camera" writes the frame straight into the input tensor. */
        for (size_t i = 0; i < n; i++) pixels[i] = (float)((i * 31 + (size_t)f * 17) % 255) / 255.0f;
        s = ramify_session_run_binding(session, binding);
        if (s != RAMIFY_STATUS_OK) break;
        size_t best = 0;
        for (size_t k = 1; k < classes; k++)
            if (scores[k] > scores[best]) best = k;
        printf("frame %d: class %zu (score %g)\n", f, best, scores[best]);
    }
    if (s != RAMIFY_STATUS_OK) fail("run", s);

    ramify_binding_destroy(binding);
    ramify_tensor_release(frame);
    free(scores);
    ramify_session_destroy(session);
    return s == RAMIFY_STATUS_OK ? 0 : 1;
}
