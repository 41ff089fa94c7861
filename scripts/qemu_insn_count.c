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
 *
 * With symbols=FILE it also writes, per function of the program's symbol
 * table, the instructions executed in blocks that start in it, one
 * "<count> <symbol>" line each: the profile that shows which kernels a
 * model spends its instructions in (scripts/aarch64.sh profile).
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
static char symfile[1024];

/* One translated block's counter, for the per-symbol profile. Blocks are
 * never freed (a retranslated block gets a new one); each is summed into
 * its symbol at exit. */
struct block {
    const char *symbol;
    uint64_t insns;
    uint64_t count;
    struct block *next;
};
static struct block *blocks;

static void block_exec(unsigned int vcpu, void *udata)
{
    struct block *b = udata;
    __atomic_fetch_add(&b->count, b->insns, __ATOMIC_RELAXED);
}

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
    if (symfile[0] && n > 0) {
        struct block *b = calloc(1, sizeof *b);
        if (!b) {
            return;
        }
        const char *sym = qemu_plugin_insn_symbol(qemu_plugin_tb_get_insn(tb, 0));
        b->symbol = sym ? sym : "?";
        b->insns = n;
        /* Translation may run on several threads at once. */
        b->next = __atomic_load_n(&blocks, __ATOMIC_RELAXED);
        while (!__atomic_compare_exchange_n(&blocks, &b->next, b, 0, __ATOMIC_RELEASE,
                                            __ATOMIC_RELAXED)) {
        }
        qemu_plugin_register_vcpu_tb_exec_cb(tb, block_exec, QEMU_PLUGIN_CB_NO_REGS, b);
    }
}

static int by_symbol(const void *a, const void *b)
{
    uintptr_t x = (uintptr_t)(*(struct block *const *)a)->symbol;
    uintptr_t y = (uintptr_t)(*(struct block *const *)b)->symbol;
    return x < y ? -1 : x > y;
}

/* Writes the per-symbol totals: the blocks sorted by their symbol's
 * string (one static string per symbol), summed run by run. */
static void write_symbols(void)
{
    FILE *out = fopen(symfile, "w");
    if (!out) {
        return;
    }
    size_t len = 0;
    for (struct block *b = blocks; b; b = b->next) {
        len++;
    }
    struct block **all = malloc((len ? len : 1) * sizeof *all);
    if (!all) {
        fclose(out);
        return;
    }
    len = 0;
    for (struct block *b = blocks; b; b = b->next) {
        all[len++] = b;
    }
    qsort(all, len, sizeof *all, by_symbol);
    for (size_t i = 0; i < len;) {
        uint64_t sum = 0;
        size_t j = i;
        for (; j < len && all[j]->symbol == all[i]->symbol; j++) {
            sum += all[j]->count;
        }
        if (sum) {
            fprintf(out, "%llu %s\n", (unsigned long long)sum, all[i]->symbol);
        }
        i = j;
    }
    free(all);
    fclose(out);
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
    if (symfile[0]) {
        write_symbols();
    }
}

QEMU_PLUGIN_EXPORT int qemu_plugin_install(qemu_plugin_id_t id,
                                           const qemu_info_t *info, int argc,
                                           char **argv)
{
    for (int i = 0; i < argc; i++) {
        if (strncmp(argv[i], "outfile=", 8) == 0) {
            snprintf(outfile, sizeof outfile, "%s", argv[i] + 8);
        } else if (strncmp(argv[i], "symbols=", 8) == 0) {
            snprintf(symfile, sizeof symfile, "%s", argv[i] + 8);
        } else {
            fprintf(stderr, "insncount: unknown argument %s\n", argv[i]);
            return -1;
        }
    }
    qemu_plugin_register_vcpu_tb_trans_cb(id, tb_trans);
    qemu_plugin_register_atexit_cb(id, at_exit, NULL);
    return 0;
}
