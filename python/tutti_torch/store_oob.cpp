// store_oob.cpp: tutti's bootstrap over the c10d Store (see store_oob.h).
#include "store_oob.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "errors.h"

namespace tutti_torch {

struct StoreOob {
    c10d::Store *store;
    std::string prefix; // keeps the keys of this communicator apart
    std::string error;  // the Store's own text when it failed, for the message
};

static int oob_put(void *ctx, const char *key, const void *value, size_t len)
{
    auto *o = static_cast<StoreOob *>(ctx);
    try {
        const uint8_t *p = static_cast<const uint8_t *>(value);
        o->store->set(o->prefix + key, std::vector<uint8_t>(p, p + len));
        return 0;
    } catch (const std::exception &e) {
        if (o->error.empty()) // the first failure is the cause; later ones follow from it
            o->error = e.what();
        return -1;
    }
}

// oob_get polls Store::check (backing off from 50 us to 10 ms) rather than calling Store::wait,
// whose timeout is an exception that differs by store and cannot be told from a broken store;
// tutti asks in short slices anyway, and timeout_s == 0 asks once.
static int oob_get(void *ctx, const char *key, void *buf, size_t cap, size_t *len,
                   double timeout_s)
{
    auto *o = static_cast<StoreOob *>(ctx);
    try {
        auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(timeout_s > 0 ? timeout_s : 0));
        auto pause = std::chrono::microseconds(50);
        std::vector<std::string> keys{o->prefix + key};
        while (!o->store->check(keys)) {
            auto now = std::chrono::steady_clock::now();
            if (now >= deadline)
                return 1;
            std::this_thread::sleep_for(
                std::min<std::chrono::steady_clock::duration>(pause, deadline - now));
            pause = std::min(pause * 2, std::chrono::microseconds(10000));
        }
        std::vector<uint8_t> v = o->store->get(keys[0]);
        *len = v.size();
        std::memcpy(buf, v.data(), std::min(cap, v.size()));
        return 0;
    } catch (const std::exception &e) {
        if (o->error.empty()) // the first failure is the cause; later ones follow from it
            o->error = e.what();
        return -1;
    }
}

tutti_comm_t *make_comm(c10d::Store *store, const std::string &prefix, int rank, int size,
                        const tutti_comm_config_t &cfg)
{
    StoreOob o{store, prefix, ""};
    tutti_oob_t oob{&o, oob_put, oob_get};
    tutti_comm_t *comm = nullptr;
    tutti_status_t st = tutti_comm_init(rank, size, &oob, &cfg, &comm);
    if (st != TUTTI_OK) {
        std::string msg = status_text(st, nullptr);
        if (!o.error.empty())
            msg += "; the c10d Store said: " + o.error;
        refuse("init", "rank " + std::to_string(rank) + " of " + std::to_string(size) + ": " +
                           msg);
    }
    return comm;
}

} // namespace tutti_torch
