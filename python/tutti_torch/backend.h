// backend.h: BackendTutti, tutti's c10d::Backend for torch 2.x: a thin layer over tutti's C
// API that torch.distributed reaches for CPU tensors once the backend "tutti" is registered.
//
// Each call checks its tensors (CPU, dense, the counts c10d promises; reductions: a dtype and
// ReduceOp tutti can honour) and becomes one tutti operation, rarely a few. A synchronous call
// (asyncOp false: torch waits on the Work at once) runs blocking in the caller's thread, with no
// hand-off to a worker; an asynchronous one is posted and returns at once, its Work completed
// from tutti's completion callback. Between startCoalescing and endCoalescing asynchronous
// calls are collected and posted together, allreduces of one dtype and op as one coalesced
// allreduce.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <tutti.h>

#include "work.h"

namespace tutti_torch {

using WorkPtr = c10::intrusive_ptr<c10d::Work>;

// One c10d call, checked and ready to run: its tutti operations (one, or one per tensor of a
// large coalesced call), what to keep alive while they run, and what to do once they succeeded.
struct Call {
    c10d::OpType type = c10d::OpType::UNKNOWN;
    std::string name;
    std::vector<at::Tensor> outputs; // Work.result() and the Future's value
    // the Future's value where it is a list per rank (allgather_coalesced's, as Gloo's)
    std::optional<std::vector<std::vector<at::Tensor>>> nested_outputs;
    std::vector<at::Tensor> keep;    // buffers tutti reads or writes
    std::function<void()> finalize;  // copies into the caller's tensors, if any
    // run once launch has accepted the call, before it is posted or collected: what changes
    // the caller's tensors before the post (PREMUL_SUM's scaling in place), so that a refusal
    // leaves them as they were
    std::function<void()> prepare;
    tutti_comm_t *comm = nullptr;
    std::vector<PostFn> posts;       // run in order on comm
    // the call's own timeout (c10d's opts.timeout); kUnsetTimeout: the group's
    std::chrono::milliseconds timeout = c10d::kUnsetTimeout;
    // A single in-place allreduce that endCoalescing may merge with its neighbours.
    struct Merge {
        void *buf;
        size_t count;
        tutti_dtype_t dtype;
        tutti_op_t op;
    };
    std::optional<Merge> merge;
    // added to a mismatch's text: the op in torch's terms (errors.h, with_hint)
    std::string hint;
};

// Coalesced calls of up to kPackMax bytes of input in all are packed into one buffer and run as
// one tutti operation (the copies cost less than a second operation's latency); larger ones run
// as one operation per tensor, in place, without copies.
constexpr size_t kPackMax = size_t(1) << 20;

class BackendTutti : public c10d::Backend {
  public:
    // Options of a tutti group: pg_options of init_process_group / new_group, and what
    // getBackendOptions returns. The fields beyond c10d's map to tutti_comm_config_t (0 or ""
    // keeps tutti's default, which the environment variables set).
    struct Options : c10d::Backend::Options {
        explicit Options(std::chrono::milliseconds timeout = kBackendDefaultTimeout)
            : c10d::Backend::Options("tutti", timeout)
        {
        }
        // bytes up to which an asynchronous collective on an idle group runs in the caller's
        // thread; 0: TUTTI_INLINE_MAX if set, else never (every asynchronous call returns at
        // once, as Gloo's do); -1: never.
        long inline_max = 0;
        int worker_count = 0;  // tutti's worker threads; 0: CCL_WORKER_COUNT or 1
        std::string transport; // "auto", "shm", "ofi"; "": TUTTI_TRANSPORT or auto
        bool default_group = false; // init_process_group's group (set by tutti_torch's creator)
        // where its keys go in the group's store ("": the store itself); tutti_torch's creator
        // makes one that no earlier group (of this name, before a destroy_process_group; of an
        // earlier torchrun attempt) has used
        std::string key_prefix;
    };

    // A group of size ranks that meets through store (init_process_group, new_group).
    BackendTutti(const c10::intrusive_ptr<c10d::Store> &store, int rank, int size,
                 c10::intrusive_ptr<Options> options);
    // A group made of a communicator split from another group's (split); it owns it.
    BackendTutti(const c10::intrusive_ptr<c10d::Store> &store, int rank, int size,
                 c10::intrusive_ptr<Options> options, tutti_comm_t *comm);
    ~BackendTutti() override;

    const std::string getBackendName() const override { return "tutti"; }
    c10::intrusive_ptr<c10d::Backend::Options> getBackendOptions() override;
    bool supportsSplitting() const override { return true; }
    bool supportsCoalescing() const override { return true; }
    void setTimeout(std::chrono::milliseconds timeout) override;

    void startCoalescing() override;
    WorkPtr endCoalescing() override;
    c10::intrusive_ptr<c10d::Backend> split(const c10::intrusive_ptr<c10d::Store> &store,
                                            const std::vector<int> &ranks,
                                            const c10::intrusive_ptr<c10d::Backend::Options> &opts)
        override;
    void abort() override;
    void shutdown() override;
#ifdef TUTTI_TORCH_SHRINK
    bool supportsShrinking() const override { return true; }
    c10::intrusive_ptr<c10d::Backend> shrink(
        const std::vector<int64_t> &ranks_to_exclude, int shrink_flags = 0,
        const c10::intrusive_ptr<c10d::Backend::Options> &opts_override = nullptr) override;
#endif

    // ---- reductions (reductions.cpp) ----
    WorkPtr allreduce(std::vector<at::Tensor> &tensors,
                      const c10d::AllreduceOptions &opts = c10d::AllreduceOptions()) override;
    WorkPtr allreduce_coalesced(std::vector<at::Tensor> &tensors,
                                const c10d::AllreduceCoalescedOptions &opts =
                                    c10d::AllreduceCoalescedOptions()) override;
    WorkPtr reduce(std::vector<at::Tensor> &tensors,
                   const c10d::ReduceOptions &opts = c10d::ReduceOptions()) override;
    WorkPtr reduce_scatter(std::vector<at::Tensor> &outputs,
                           std::vector<std::vector<at::Tensor>> &inputs,
                           const c10d::ReduceScatterOptions &opts =
                               c10d::ReduceScatterOptions()) override;
    WorkPtr _reduce_scatter_base(at::Tensor &output, at::Tensor &input,
                                 const c10d::ReduceScatterOptions &opts =
                                     c10d::ReduceScatterOptions()) override;
    WorkPtr reduce_scatter_tensor_coalesced(std::vector<at::Tensor> &outputs,
                                            std::vector<at::Tensor> &inputs,
                                            const c10d::ReduceScatterOptions &opts =
                                                c10d::ReduceScatterOptions()) override;

    // ---- data movement (movement.cpp): bytes, so every dtype ----
    WorkPtr broadcast(std::vector<at::Tensor> &tensors,
                      const c10d::BroadcastOptions &opts = c10d::BroadcastOptions()) override;
    WorkPtr allgather(std::vector<std::vector<at::Tensor>> &outputs,
                      std::vector<at::Tensor> &inputs,
                      const c10d::AllgatherOptions &opts = c10d::AllgatherOptions()) override;
    WorkPtr _allgather_base(at::Tensor &output, at::Tensor &input,
                            const c10d::AllgatherOptions &opts = c10d::AllgatherOptions()) override;
    WorkPtr allgather_coalesced(std::vector<std::vector<at::Tensor>> &output_lists,
                                std::vector<at::Tensor> &inputs,
                                const c10d::AllgatherOptions &opts =
                                    c10d::AllgatherOptions()) override;
    WorkPtr allgather_into_tensor_coalesced(std::vector<at::Tensor> &outputs,
                                            std::vector<at::Tensor> &inputs,
                                            const c10d::AllgatherOptions &opts =
                                                c10d::AllgatherOptions()) override;
    WorkPtr alltoall_base(at::Tensor &output, at::Tensor &input,
                          std::vector<int64_t> &outputSplitSizes,
                          std::vector<int64_t> &inputSplitSizes,
                          const c10d::AllToAllOptions &opts = c10d::AllToAllOptions()) override;
    WorkPtr alltoall(std::vector<at::Tensor> &outputs, std::vector<at::Tensor> &inputs,
                     const c10d::AllToAllOptions &opts = c10d::AllToAllOptions()) override;
    WorkPtr gather(std::vector<std::vector<at::Tensor>> &outputs, std::vector<at::Tensor> &inputs,
                   const c10d::GatherOptions &opts = c10d::GatherOptions()) override;
    WorkPtr scatter(std::vector<at::Tensor> &outputs, std::vector<std::vector<at::Tensor>> &inputs,
                    const c10d::ScatterOptions &opts = c10d::ScatterOptions()) override;

    // ---- barriers (backend.cpp) ----
    WorkPtr barrier(const c10d::BarrierOptions &opts = c10d::BarrierOptions()) override;
    void monitoredBarrier(const c10d::BarrierOptions &opts, bool waitAllRanks = false) override;
    // Sequence numbers (TORCH_DISTRIBUTED_DEBUG=DETAIL's wrapper compares them across ranks
    // before each collective): every rank's group starts at 0, as Gloo's does, and counts the
    // collectives it accepted.
    void setSequenceNumberForGroup() override {}
    uint64_t getSequenceNumberForGroup() override { return seq_.load(std::memory_order_acquire); }

    // ---- point to point (p2p.cpp) ----
    WorkPtr send(std::vector<at::Tensor> &tensors, int dstRank, int tag) override;
    WorkPtr recv(std::vector<at::Tensor> &tensors, int srcRank, int tag) override;
    WorkPtr recvAnysource(std::vector<at::Tensor> &tensors, int tag) override;

    // For the Python module: the group's communicator and timeout.
    tutti_comm_t *comm() const { return comm_; }
    std::chrono::milliseconds timeout() const { return options_->timeout; }

  private:
    // launch runs call: blocking here when !async; else collected while coalescing, or
    // posted. Refusals (tutti's argument checks included) throw here, in the caller. timeout
    // is the call's own (c10d's opts.timeout), kUnsetTimeout for the group's.
    WorkPtr launch(Call &&call, bool async,
                   std::chrono::milliseconds timeout = c10d::kUnsetTimeout);
    // reduce_scatter_uneven is reduce_scatter with inputs of different sizes (reductions.cpp).
    WorkPtr reduce_scatter_uneven(const at::Tensor &out, const std::vector<at::Tensor> &in,
                                  const c10d::ReduceScatterOptions &opts);
    // check_usable refuses calls on a group that was shut down or aborted.
    void check_usable(const std::string &op) const;
    // receive posts recv and recvAnysource (peer TUTTI_ANY_SOURCE), named op.
    WorkPtr receive(const std::string &op, c10d::OpType type, std::vector<at::Tensor> &tensors,
                    int peer, int tag);
    void destroy();
    void open_store_probe();
    void await_store_server_gone();
    void set_group_note();
    std::string group_note_; // "" on WORLD's group; else which global ranks it holds

    c10::intrusive_ptr<c10d::Store> store_; // monitoredBarrier's meeting place
    int store_probe_ = -1; // an idle connection to rank 0's TCPStore server (open_store_probe)
    c10::intrusive_ptr<Options> options_;
    std::shared_ptr<Tracker> tracker_ = std::make_shared<Tracker>();
    // The group's one communicator: its collectives run in its queue, its sends and receives
    // in its point-to-point engine, apart from the queue and from each other.
    tutti_comm_t *comm_ = nullptr;
    std::atomic<int> state_{0}; // 0 usable, 1 aborted, 2 shut down

    std::mutex coalesce_mu_; // guards what follows
    std::atomic<bool> coalescing_{false};
    std::vector<Call> coalesced_;
    c10::intrusive_ptr<Work> coalesced_work_;

    uint64_t monitored_seq_ = 0; // monitoredBarrier calls so far (their store keys)
    std::atomic<uint64_t> seq_{0}; // collectives accepted by launch (getSequenceNumberForGroup)
};

} // namespace tutti_torch
