/* solo.c: the key-value store of a job of one rank: the bootstrap still puts and gets (its own
 * records), so it gets an in-process table instead of a server on a port it has no use for. */
#include <stdlib.h>

#include "store.h"

typedef struct item {
    struct item *next;
    char *key;
    void *val;
    size_t len;
} item_t;

struct tutti__solo {
    item_t *items;
};

static item_t *find(tutti__solo_t *s, const char *key)
{
    for (item_t *i = s->items; i != NULL; i = i->next)
        if (strcmp(i->key, key) == 0)
            return i;
    return NULL;
}

static int solo_put(void *ctx, const char *key, const void *value, size_t len)
{
    tutti__solo_t *s = ctx;
    void *val = malloc(len ? len : 1);
    if (val == NULL)
        return -1;
    memcpy(val, value, len);
    item_t *i = find(s, key);
    if (i == NULL) {
        i = calloc(1, sizeof *i);
        char *k = strdup(key);
        if (i == NULL || k == NULL) {
            free(i);
            free(k);
            free(val);
            return -1;
        }
        i->key = k;
        i->next = s->items;
        s->items = i;
    } else
        free(i->val);
    i->val = val;
    i->len = len;
    return 0;
}

/* Nobody else can put a key: one not there now never comes, so there is nothing to wait for. */
static int solo_get(void *ctx, const char *key, void *buf, size_t cap, size_t *len,
                    double timeout_s)
{
    (void)timeout_s;
    item_t *i = find(ctx, key);
    if (i == NULL)
        return 1;
    memcpy(buf, i->val, i->len < cap ? i->len : cap);
    *len = i->len;
    return 0;
}

tutti__solo_t *tutti__solo_new(void) { return calloc(1, sizeof(tutti__solo_t)); }

tutti_oob_t tutti__solo_oob(tutti__solo_t *s)
{
    return (tutti_oob_t){.ctx = s, .put = solo_put, .get = solo_get};
}

void tutti__solo_free(tutti__solo_t *s)
{
    if (s == NULL)
        return;
    for (item_t *i = s->items, *n; i != NULL; i = n) {
        n = i->next;
        free(i->key);
        free(i->val);
        free(i);
    }
    free(s);
}
