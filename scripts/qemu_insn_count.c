/*
 * A QEMU TCG plugin that counts the guest instructions a program executes,
 * per thread, and prints the total when the program exits:
 *
 *     insns: <total>
 *
 * Our own code against the plugin API header of the installed qemu-user
 * (include/qemu/qemu-plugin.h of Debian's qemu source package, fetched by
 * scripts/aarch64.sh). Each translated block adds its instruction count to
 * its thread's counter when it runs, so the total does not depend on
 * timing or on the other threads. Used as the performance proxy for the
 * aarch64 kernels, whose emulated times mean nothing.
 *
 * Build: gcc -shared -fPIC -O2 -I<qemu>/include/qemu -o libinsncount.so qemu_insn_count.c
 * Use:   qemu-aarch64 -plugin ./libinsncount.so,outfile=FILE PROGRAM ARGS
 *        (without outfile the total goes to stderr)
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <qemu-plugin.h>

QEMU_PLUGIN_EXPORT int qemu_plugin_version = QEMU_PLUGIN_VERSION;

/* Threads a run may start over its life (vCPU indices are not reused). */
#define MAX_THREADS 4096

static uint64_t counts[MAX_THREADS];
static uint64_t overflow; /* threads past MAX_THREADS: then the run fails */
static char outfile[1024];

static void tb_exec(unsigned int vcpu, void *udata)
{
    uint64_t n = (uint64_t)(uintptr_t)udata;
    if (vcpu < MAX_THREADS) {
        counts[vcpu] += n;
    } else {
        __atomic_fetch_add(&overflow, n, __ATOMIC_RELAXED);
    }
}

static void tb_trans(qemu_plugin_id_t id, struct qemu_plugin_tb *tb)
{
    size_t n = qemu_plugin_tb_n_insns(tb);
    qemu_plugin_register_vcpu_tb_exec_cb(tb, tb_exec, QEMU_PLUGIN_CB_NO_REGS,
                                         (void *)(uintptr_t)n);
}

static void at_exit(qemu_plugin_id_t id, void *p)
{
    uint64_t total = 0;
    for (int i = 0; i < MAX_THREADS; i++) {
        total += counts[i];
    }
    FILE *out = outfile[0] ? fopen(outfile, "w") : stderr;
    if (!out) {
        return;
    }
    if (overflow) {
        fprintf(out, "insns: error: more than %d threads\n", MAX_THREADS);
    } else {
        fprintf(out, "insns: %llu\n", (unsigned long long)total);
    }
    if (out != stderr) {
        fclose(out);
    }
}

QEMU_PLUGIN_EXPORT int qemu_plugin_install(qemu_plugin_id_t id,
                                           const qemu_info_t *info, int argc,
                                           char **argv)
{
    for (int i = 0; i < argc; i++) {
        if (strncmp(argv[i], "outfile=", 8) == 0) {
            snprintf(outfile, sizeof outfile, "%s", argv[i] + 8);
        } else {
            fprintf(stderr, "insncount: unknown argument %s\n", argv[i]);
            return -1;
        }
    }
    qemu_plugin_register_vcpu_tb_trans_cb(id, tb_trans);
    qemu_plugin_register_atexit_cb(id, at_exit, NULL);
    return 0;
}
