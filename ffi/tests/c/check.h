/*
 * The checks the C test programs share: CHECK counts a failed condition in
 * `failures` and prints it with ramify's last error; EXPECT_STATUS checks a
 * call's status and that a failure left a message.
 */
#ifndef RAMIFY_TEST_CHECK_H
#define RAMIFY_TEST_CHECK_H

#include <stdio.h>

#include "ramify.h"

static int failures = 0;

#define CHECK(cond, ...)                                                    \
    do {                                                                    \
        if (!(cond)) {                                                      \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                   \
            fprintf(stderr, " (last error: %s)\n", ramify_last_error());    \
            failures++;                                                     \
        }                                                                   \
    } while (0)

/* A call that must return `want`; a failure must leave a non-empty message. */
#define EXPECT_STATUS(call, want)                                                 \
    do {                                                                          \
        RamifyStatus s_ = (call);                                                 \
        CHECK(s_ == (want), "%s returned %s, expected %s", #call,                 \
              ramify_status_name(s_), ramify_status_name(want));                  \
        if ((want) != RAMIFY_STATUS_OK)                                           \
            CHECK(ramify_last_error()[0] != '\0', "no message after %s", #call); \
    } while (0)

/* W and b of the models in ffi/tests/common/model.rs (y = x.W + b). */
static const float W[12] = {1, 0, -1, 2, 1, 0, 0, 0.5f, 1, -1, 1, 2};
static const float B[3] = {0.5f, -1, 2};

#endif
