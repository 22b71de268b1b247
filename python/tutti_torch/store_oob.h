// store_oob.h: tutti's bootstrap over the c10d Store torch hands a backend: the store as a
// tutti_oob_t, and communicator creation through it (no port or rendezvous of tutti's own).
#pragma once

#include <string>

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <tutti.h>

namespace tutti_torch {

// make_comm creates one tutti communicator of rank in size ranks through store, its keys under
// prefix (each communicator of a group needs its own), configured by cfg. Throws with tutti's
// text, and the store's own when it was the store that failed.
tutti_comm_t *make_comm(c10d::Store *store, const std::string &prefix, int rank, int size,
                        const tutti_comm_config_t &cfg);

} // namespace tutti_torch
