/* p2p_env.c: the point-to-point envelope on the wire: sealing one (magic and a check word over
 * its fields and both ranks) and deciding whether one from a peer may be trusted, before the
 * engine acts on anything it says. */
#include <stdio.h>

#include "p2p.h"

#define ENV_MAGIC 0x70327032u /* "p2p2": the envelope with the flow-control count */

/* A cache line and the flow-control count (32 inline bytes keep a 32-byte message, eight
 * floats, in one envelope: with 24, a probe's 32-byte ping-pong on shm took 0.95 us, not 0.65) */
_Static_assert(sizeof(tutti__p2p_env_t) == 72, "the envelope's size is part of the protocol");

/* mix folds v into h (splitmix64's finalizer): a bit flipped anywhere changes about half of
 * the result, so a torn or stray envelope fails the check. Not a defence against a peer that
 * forges envelopes on purpose: such a peer can send wrong data anyway. */
static uint64_t mix(uint64_t h, uint64_t v)
{
    h ^= v + 0x9e3779b97f4a7c15ull;
    h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ull;
    h = (h ^ (h >> 27)) * 0x94d049bb133111ebull;
    return h ^ (h >> 31);
}

static uint32_t check_word(const tutti__p2p_env_t *env, int src, int dst)
{
    uint64_t h = mix(ENV_MAGIC, ((uint64_t)(uint32_t)src << 32) | (uint32_t)dst);
    h = mix(h, ((uint64_t)env->kind << 48) | ((uint64_t)env->flags << 32) | (uint32_t)env->tag);
    h = mix(h, env->len);
    h = mix(h, env->seq);
    h = mix(h, env->ack);
    return (uint32_t)(h ^ (h >> 32));
}

void tutti__p2p_env_seal(tutti__p2p_env_t *env, int src, int dst)
{
    env->magic = ENV_MAGIC;
    env->check = check_word(env, src, dst);
}

#define BAD(...) (snprintf(why, cap, __VA_ARGS__), TUTTI_ERR_TRANSPORT)

tutti_status_t tutti__p2p_env_check(const tutti__p2p_env_t *env, int src, int dst, char *why,
                                    size_t cap)
{
    if (env->magic != ENV_MAGIC)
        return BAD("its magic number is 0x%08x, not 0x%08x: it is not an envelope", env->magic,
                   ENV_MAGIC);
    if (env->check != check_word(env, src, dst))
        return BAD("its check word 0x%08x does not match its fields (kind %u, tag %d, %llu "
                   "bytes, message %llu): it was damaged, or it was meant for another pair of "
                   "ranks",
                   env->check, env->kind, env->tag, (unsigned long long)env->len,
                   (unsigned long long)env->seq);
    switch (env->kind) {
    case TUTTI__P2P_EAGER:
        if (env->flags != 0 || env->tag < 0 || env->len > TUTTI__P2P_EAGER_MAX)
            return BAD("an eager message with flags %u, tag %d and %llu bytes (at most %zu "
                       "travel eagerly)",
                       env->flags, env->tag, (unsigned long long)env->len, TUTTI__P2P_EAGER_MAX);
        return TUTTI_OK;
    case TUTTI__P2P_RTS:
        if ((env->flags & ~(uint16_t)TUTTI__P2P_SYNC) != 0 || env->tag < 0 ||
            (env->len <= TUTTI__P2P_EAGER_MAX && !(env->flags & TUTTI__P2P_SYNC)) ||
            env->len > (uint64_t)PTRDIFF_MAX)
            return BAD("a request to send with flags %u, tag %d and %llu bytes (only messages "
                       "over %zu bytes and within the address space are announced so, or any "
                       "flagged for flow control)",
                       env->flags, env->tag, (unsigned long long)env->len, TUTTI__P2P_EAGER_MAX);
        return TUTTI_OK;
    case TUTTI__P2P_CTS:
        if ((env->flags & ~(uint16_t)TUTTI__P2P_REFUSED) != 0 || env->len != 0 || env->tag != 0)
            return BAD("a clear-to-send with flags %u, tag %d and %llu bytes", env->flags,
                       env->tag, (unsigned long long)env->len);
        return TUTTI_OK;
    case TUTTI__P2P_DATA:
        if ((env->flags & ~(uint16_t)TUTTI__P2P_WITHDRAWN) != 0 || env->tag != 0 ||
            env->len > (uint64_t)PTRDIFF_MAX ||
            ((env->flags & TUTTI__P2P_WITHDRAWN) && env->len != 0))
            return BAD("a data header with flags %u, tag %d and %llu bytes", env->flags, env->tag,
                       (unsigned long long)env->len);
        return TUTTI_OK;
    case TUTTI__P2P_CREDIT:
        if (env->flags != 0 || env->tag != 0 || env->len != 0 || env->seq != 0 || env->ack == 0)
            return BAD("a credit with flags %u, tag %d, %llu bytes, number %llu and count %llu",
                       env->flags, env->tag, (unsigned long long)env->len,
                       (unsigned long long)env->seq, (unsigned long long)env->ack);
        return TUTTI_OK;
    default:
        return BAD("its kind is %u (known: 1 eager, 2 request to send, 3 clear to send, 4 data, "
                   "5 credit)",
                   env->kind);
    }
}
