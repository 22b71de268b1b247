/* check_env.c: the environment variables' documentation against src/common/env.c, so that the two
 * cannot drift: docs/configuration.md's table must be the one generated from env.c's table
 * (`build/tests/check_env --write docs/configuration.md` regenerates it), and every range a help
 * text states as "(lo..hi)" must be what communicator creation accepts. */
#include <check.h>
#include "check_main.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/common/common.h"
#include "harness.h"

#ifndef TH_CONFIG_DOC
#error "meson defines TH_CONFIG_DOC, the path of docs/configuration.md"
#endif

/* The table sits between these two lines of the document. */
#define BEGIN_MARK                                                                             \
    "<!-- env-table: generated from src/common/env.c by `build/tests/check_env --write "        \
    "docs/configuration.md`; edit the help texts there, not here -->"
#define END_MARK "<!-- end env-table -->"

/* ---- the table ------------------------------------------------------------------------------ */

typedef struct sbuf {
    char *p;
    size_t len, cap;
} sbuf_t;

static void put(sbuf_t *b, const char *s, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        b->cap = 2 * (b->len + n + 1);
        b->p = realloc(b->p, b->cap);
        if (b->p == NULL) {
            fprintf(stderr, "check_env: out of memory\n");
            exit(2);
        }
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void puts_(sbuf_t *b, const char *s) { put(b, s, strlen(s)); }

/* cell writes text into a table cell: a '|' would end the cell, so it is escaped. */
static void cell(sbuf_t *b, const char *text)
{
    for (const char *s = text; *s; s++) {
        if (*s == '|')
            puts_(b, "\\");
        put(b, s, 1);
    }
}

/* make_table renders env.c's table as Markdown, one row per variable (the caller frees it). */
static char *make_table(void)
{
    sbuf_t b = {0};
    puts_(&b, "| Variable | Default | Meaning |\n|---|---|---|\n");
    for (size_t i = 0; i < tutti__env_knob_count; i++) {
        const tutti__env_knob_t *k = &tutti__env_knobs[i];
        puts_(&b, "| `");
        cell(&b, k->name);
        puts_(&b, "` | ");
        if (k->deflt != NULL) {
            puts_(&b, "`");
            cell(&b, k->deflt);
            puts_(&b, "`");
        }
        puts_(&b, " | ");
        cell(&b, k->help);
        puts_(&b, " |\n");
    }
    return b.p;
}

/* read_all returns a file's contents (the caller frees them), or NULL with errno set. */
static char *read_all(const char *path)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return NULL;
    sbuf_t b = {0};
    puts_(&b, "");
    char chunk[4096];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
        put(&b, chunk, n);
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(b.p);
        errno = EIO;
        return NULL;
    }
    return b.p;
}

/* find_block finds the lines between the two marks: [*start, *end) of doc. NULL if it is fine,
 * else what is wrong. */
static const char *find_block(const char *doc, const char **start, const char **end)
{
    const char *b = strstr(doc, BEGIN_MARK "\n");
    if (b == NULL)
        return "no line \"" BEGIN_MARK "\"";
    if (strstr(b + 1, BEGIN_MARK) != NULL)
        return "the begin mark appears twice";
    *start = b + strlen(BEGIN_MARK "\n");
    const char *e = strstr(*start, "\n" END_MARK);
    if (e == NULL && strncmp(*start, END_MARK, strlen(END_MARK)) == 0)
        e = *start - 1; /* an empty block */
    if (e == NULL)
        return "no line \"" END_MARK "\" after the begin mark";
    *end = e + 1;
    return NULL;
}

/* ---- the document against the table -------------------------------------------------------- */

START_TEST(test_doc_is_generated)
{
    char *doc = read_all(TH_CONFIG_DOC);
    ck_assert_msg(doc != NULL, "cannot read %s: %s", TH_CONFIG_DOC, strerror(errno));
    const char *start = NULL, *end = NULL;
    const char *why = find_block(doc, &start, &end);
    ck_assert_msg(why == NULL, "%s: %s", TH_CONFIG_DOC, why);
    char *want = make_table();
    size_t have_len = (size_t)(end - start);
    if (have_len != strlen(want) || memcmp(start, want, have_len) != 0) {
        /* name the first line that differs */
        const char *h = start, *w = want;
        int line = 1;
        while (h < end && *w && *h == *w) {
            if (*h == '\n')
                line++;
            h++;
            w++;
        }
        while (h > start && h[-1] != '\n')
            h--;
        while (w > want && w[-1] != '\n')
            w--;
        int hn = (int)strcspn(h, "\n"), wn = (int)strcspn(w, "\n");
        if (h >= end)
            hn = 0;
        ck_abort_msg("%s's variable table differs from src/common/env.c's at line %d of the table:\n"
                     "  document: %.*s\n  env.c:    %.*s\n"
                     "Edit the help text in env.c if it is wrong, then regenerate the document "
                     "with build/tests/check_env --write docs/configuration.md",
                     TH_CONFIG_DOC, line, hn, h, wn, w);
    }
    free(want);
    free(doc);
}
END_TEST

START_TEST(test_names_unique_and_described)
{
    for (size_t i = 0; i < tutti__env_knob_count; i++) {
        const tutti__env_knob_t *k = &tutti__env_knobs[i];
        ck_assert_msg(k->name != NULL && k->name[0] != '\0', "entry %zu has no name", i);
        ck_assert_msg(k->help != NULL && k->help[0] != '\0', "%s has no help text", k->name);
        for (size_t j = 0; j < i; j++)
            ck_assert_msg(strcmp(tutti__env_knobs[j].name, k->name) != 0,
                          "%s is in env.c's table twice", k->name);
    }
}
END_TEST

/* ---- stated ranges against communicator creation ----------------------------------------- */

/* stated_range reads "(lo..hi)" from a help text; false if there is none. */
static bool stated_range(const char *help, long *lo, long *hi)
{
    for (const char *p = strchr(help, '('); p != NULL; p = strchr(p + 1, '(')) {
        char tail;
        if (sscanf(p, "(%ld..%ld%c", lo, hi, &tail) == 3 && tail == ')')
            return true;
    }
    return false;
}

typedef struct probe {
    const char *name;
    long value;
    bool accept;
} probe_t;

/* probe_rank creates a one-rank communicator with the knob set (by the harness) and checks that
 * it is accepted, or refused with TUTTI_ERR_INVALID_ARG and a text that names the variable. */
static int probe_rank(int rank, int size, void *arg)
{
    (void)rank;
    (void)size;
    const probe_t *p = arg;
    tutti_comm_t *comm = NULL;
    tutti_status_t st = tutti_comm_init_env(NULL, &comm);
    if (p->accept) {
        if (st != TUTTI_OK)
            return th_fail("%s=%ld is in its documented range but communicator creation said %d "
                           "(%s): %s",
                           p->name, p->value, st, tutti_strerror(st), tutti_last_error());
        tutti_comm_destroy(comm);
        return 0;
    }
    if (st == TUTTI_OK) {
        tutti_comm_destroy(comm);
        return th_fail("%s=%ld is outside its documented range but a communicator was created",
                       p->name, p->value);
    }
    if (st != TUTTI_ERR_INVALID_ARG || strstr(tutti_last_error(), p->name) == NULL)
        return th_fail("%s=%ld: expected TUTTI_ERR_INVALID_ARG naming the variable, got %d (%s): "
                       "%s",
                       p->name, p->value, st, tutti_strerror(st), tutti_last_error());
    return 0;
}

START_TEST(test_stated_ranges)
{
    int ranged = 0;
    for (size_t i = 0; i < tutti__env_knob_count; i++) {
        const tutti__env_knob_t *k = &tutti__env_knobs[i];
        long lo, hi;
        if (!stated_range(k->help, &lo, &hi))
            continue;
        ranged++;
        const long values[4] = {lo - 1, lo, hi, hi + 1};
        for (int v = 0; v < 4; v++) {
            probe_t p = {k->name, values[v], v == 1 || v == 2};
            char setting[128];
            snprintf(setting, sizeof setting, "%s=%ld", k->name, p.value);
            th_opts_t o = TH_OPTS_INIT;
            o.transport = "shm";
            o.timeout_s = 30;
            o.env[0] = setting;
            ck_assert_msg(th_run_opts(1, &o, probe_rank, &p) == 0,
                          "%s: env.c says (%ld..%ld); communicator creation disagrees at %ld "
                          "(details on stderr)",
                          k->name, lo, hi, p.value);
        }
    }
    /* CCL_WORKER_COUNT at least states one, so this test is not empty */
    ck_assert_msg(ranged > 0, "no help text in env.c states a range \"(lo..hi)\"");
}
END_TEST

static Suite *env_suite(void)
{
    Suite *s = suite_create("env");
    TCase *tc = tcase_create("doc");
    tcase_add_test(tc, test_doc_is_generated);
    tcase_add_test(tc, test_names_unique_and_described);
    suite_add_tcase(s, tc);
    tc = tcase_create("ranges");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_stated_ranges);
    suite_add_tcase(s, tc);
    return s;
}

/* write_doc replaces the table between the marks of the document at path with env.c's. */
static int write_doc(const char *path)
{
    char *doc = read_all(path);
    if (doc == NULL) {
        fprintf(stderr, "check_env: cannot read %s: %s\n", path, strerror(errno));
        return 1;
    }
    const char *start = NULL, *end = NULL;
    const char *why = find_block(doc, &start, &end);
    if (why != NULL) {
        fprintf(stderr, "check_env: %s: %s; add the two marks where the table belongs\n", path, why);
        free(doc);
        return 1;
    }
    char *table = make_table();
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    bool ok = f != NULL && fwrite(doc, 1, (size_t)(start - doc), f) == (size_t)(start - doc) &&
              fputs(table, f) >= 0 && fputs(end, f) >= 0;
    if (f != NULL && fclose(f) != 0)
        ok = false;
    if (!ok || rename(tmp, path) != 0) {
        fprintf(stderr, "check_env: cannot write %s: %s\n", path, strerror(errno));
        remove(tmp);
        ok = false;
    }
    free(table);
    free(doc);
    return ok ? 0 : 1;
}

/* With --write FILE it regenerates FILE's table; without arguments it runs the tests. */
int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--write") == 0)
        return write_doc(argv[2]);
    if (argc != 1) {
        fprintf(stderr, "usage: check_env            run the tests\n"
                        "       check_env --write FILE  regenerate FILE's variable table\n");
        return 2;
    }
    return th_check_run(env_suite());
}
