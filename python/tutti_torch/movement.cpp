// movement.cpp: BackendTutti's data movement: broadcast, allgather (list, tensor and coalesced
// forms), alltoall (tensor with even or uneven splits, and list), gather and scatter. They move
// bytes, so they take every dtype. gather and scatter, which tutti lacks, are one alltoallv with
// every count zero but those to or from the root: one ordered collective, so they mix safely
// with the others.
#include "backend.h"

#include <memory>

#include "errors.h"
#include "tensors.h"

namespace tutti_torch {

// What a mismatch's text means in torch's terms (tutti's text names the tutti call it ran).
static const char *const kBytesHint =
    "tutti moves this call's data as bytes: the uint8 counts above are the tensors' bytes";
static const char *const kAlltoallHint =
    "tutti runs all_to_all as an alltoall(v) of bytes: the counts above are bytes, and each "
    "rank's input split for rank j must equal rank j's output split for it; every rank must "
    "give split sizes, or none (without them the call is an alltoall, with them an alltoallv)";
static const char *const kGatherHint =
    "tutti runs gather as one alltoallv of bytes: the counts above are bytes; most often the "
    "ranks named different roots (dst), or the root's gather_list does not match the tensors "
    "the others sent";
static const char *const kScatterHint =
    "tutti runs scatter as one alltoallv of bytes: the counts above are bytes; most often the "
    "ranks named different roots (src), or the root's scatter_list does not match the others' "
    "output tensors";

// own_slot: send is this rank's block of an allgather's output (tutti's in-place form, which
// it takes as is).
static bool own_slot(const void *send, const void *recv, size_t nb, int rank)
{
    return send == static_cast<const uint8_t *>(recv) + nb * static_cast<size_t>(rank);
}

static PostFn allgather_post(const void *send, void *recv, size_t nbytes)
{
    return [send, recv, nbytes](tutti_comm_t *comm, tutti_work_t **h) {
        return tutti_allgather(send, recv, nbytes, TUTTI_UINT8, comm, h);
    };
}

// alltoallv_post: counts and displacements in bytes, kept alive with the post.
static PostFn alltoallv_post(const void *send, std::vector<size_t> sc, void *recv,
                             std::vector<size_t> rc)
{
    auto s = std::make_shared<std::vector<size_t>>(std::move(sc));
    auto r = std::make_shared<std::vector<size_t>>(std::move(rc));
    return [send, recv, s, r](tutti_comm_t *comm, tutti_work_t **h) {
        return tutti_alltoallv(send, s->data(), nullptr, recv, r->data(), nullptr, TUTTI_UINT8,
                               comm, h);
    };
}

WorkPtr BackendTutti::broadcast(std::vector<at::Tensor> &tensors,
                                const c10d::BroadcastOptions &opts)
{
    const std::string op = "broadcast";
    check_usable(op);
    const at::Tensor &t = check_one(op, tensors);
    check_root(op, opts.rootRank, size_);
    if (opts.rootTensor != 0)
        refuse(op, "rootTensor must be 0 (one tensor per call)");
    bool root = opts.rootRank == rank_;
    Buf b(t, root);
    Call c;
    c.type = c10d::OpType::BROADCAST;
    c.name = op;
    c.hint = kBytesHint;
    c.outputs = {t};
    c.comm = comm_;
    c.keep = {b.work};
    if (b.copied() && !root)
        c.finalize = [b] { b.copy_back(); };
    void *p = b.ptr();
    size_t n = nbytes(t);
    int rr = static_cast<int>(opts.rootRank);
    c.posts.push_back([p, n, rr](tutti_comm_t *comm, tutti_work_t **h) {
        return tutti_broadcast(p, n, TUTTI_UINT8, rr, comm, h);
    });
    return launch(std::move(c), opts.asyncOp, opts.timeout);
}

WorkPtr BackendTutti::allgather(std::vector<std::vector<at::Tensor>> &outputs,
                                std::vector<at::Tensor> &inputs,
                                const c10d::AllgatherOptions &opts)
{
    const std::string op = "allgather";
    check_usable(op);
    const at::Tensor &in = check_one(op, inputs);
    if (outputs.size() != 1)
        refuse(op, "takes one output list per call, got " + std::to_string(outputs.size()));
    const auto &outs = outputs[0];
    check_list(op, "output", outs, in, size_);
    Call c;
    c.type = c10d::OpType::ALLGATHER;
    c.name = op;
    c.hint = kBytesHint;
    c.outputs = outs;
    c.comm = comm_;
    at::Tensor src = contiguous_bytes(in);
    size_t nb = nbytes(in);
    void *recv;
    if (adjacent(outs)) { // views of one tensor: gathered in place
        recv = outs[0].data_ptr();
        c.keep = {src};
    } else {
        at::Tensor flat = byte_buffer(nb * outs.size());
        recv = flat.data_ptr();
        c.keep = {src, flat};
        std::vector<at::Tensor> o = outs;
        c.finalize = [o, flat, nb] {
            const uint8_t *p = flat.data_ptr<uint8_t>();
            for (const auto &t : o)
                bytes_in(t, p), p += nb;
        };
    }
    if (!own_slot(src.data_ptr(), recv, nb, rank_) &&
        overlaps(src.data_ptr(), nb, recv, nb * outs.size())) {
        src = plain(src).clone(); // the input is a view into the outputs, not its own slot
        c.keep.push_back(src);
    }
    c.posts.push_back(allgather_post(src.data_ptr(), recv, nb));
    return launch(std::move(c), opts.asyncOp, opts.timeout);
}

// check_gather_pair: output holds world size times input's elements, of one dtype.
static void check_gather_pair(const std::string &op, const at::Tensor &output,
                              const at::Tensor &input, int size)
{
    check_tensor(op, output);
    check_tensor(op, input);
    check_same_dtype(op, input, output);
    if (output.numel() != input.numel() * size)
        refuse(op, "the output must hold world size (" + std::to_string(size) +
                       ") times the input's elements: input " + std::to_string(input.numel()) +
                       ", output " + std::to_string(output.numel()));
}

WorkPtr BackendTutti::_allgather_base(at::Tensor &output, at::Tensor &input,
                                      const c10d::AllgatherOptions &opts)
{
    const std::string op = "_allgather_base";
    check_usable(op);
    check_gather_pair(op, output, input, size_);
    Buf bi(input, true), bo(output, false);
    if (!own_slot(bi.ptr(), bo.ptr(), nbytes(input), rank_))
        bi.stage_if_overlapping(bo.ptr(), nbytes(output), true);
    Call c;
    c.type = c10d::OpType::_ALLGATHER_BASE;
    c.name = op;
    c.hint = kBytesHint;
    c.outputs = {output};
    c.comm = comm_;
    c.keep = {bi.work, bo.work};
    if (bo.copied())
        c.finalize = [bo] { bo.copy_back(); };
    c.posts.push_back(allgather_post(bi.ptr(), bo.ptr(), nbytes(input)));
    return launch(std::move(c), opts.asyncOp, opts.timeout);
}

// output_lists[r][i] = rank r's inputs[i]: every rank's inputs are packed into one block and
// gathered in one allgather (torch's allgather_coalesced; shapes may differ per input).
WorkPtr BackendTutti::allgather_coalesced(std::vector<std::vector<at::Tensor>> &output_lists,
                                          std::vector<at::Tensor> &inputs,
                                          const c10d::AllgatherOptions &opts)
{
    const std::string op = "allgather_coalesced";
    check_usable(op);
    if (inputs.empty())
        refuse(op, "got no input tensors");
    if (output_lists.size() != static_cast<size_t>(size_))
        refuse(op, "needs one output list per rank (" + std::to_string(size_) + "), got " +
                       std::to_string(output_lists.size()));
    size_t total = 0;
    for (const auto &t : inputs) {
        check_tensor(op, t);
        total += nbytes(t);
    }
    std::vector<at::Tensor> flat_outs;
    for (const auto &list : output_lists) {
        if (list.size() != inputs.size())
            refuse(op, "every output list must have as many tensors as the inputs (" +
                           std::to_string(inputs.size()) + "), got " +
                           std::to_string(list.size()));
        for (size_t i = 0; i < list.size(); i++) {
            check_tensor(op, list[i]);
            check_same_dtype(op, inputs[i], list[i]);
            if (list[i].numel() != inputs[i].numel())
                refuse(op, "output tensor " + std::to_string(i) + " has " +
                               std::to_string(list[i].numel()) + " elements, its input " +
                               std::to_string(inputs[i].numel()));
            flat_outs.push_back(list[i]);
        }
    }
    Call c;
    c.type = c10d::OpType::ALLGATHER_COALESCED;
    c.name = op;
    c.hint = kBytesHint;
    c.outputs = flat_outs;
    c.nested_outputs = output_lists;
    c.comm = comm_;
    at::Tensor send = byte_buffer(total), recv = byte_buffer(total * size_);
    uint8_t *p = send.data_ptr<uint8_t>();
    for (const auto &t : inputs)
        bytes_out(t, p), p += nbytes(t);
    c.keep = {send, recv};
    c.finalize = [flat_outs, recv] {
        const uint8_t *q = recv.data_ptr<uint8_t>();
        for (const auto &o : flat_outs)
            bytes_in(o, q), q += nbytes(o);
    };
    c.posts.push_back(allgather_post(send.data_ptr(), recv.data_ptr(), total));
    return launch(std::move(c), opts.asyncOp, opts.timeout);
}

// Small in all: the inputs are packed into one block, gathered at once, and each rank's block
// is cut back into the outputs (outputs[i] = every rank's inputs[i], in rank order). Large: one
// allgather per pair, in place.
WorkPtr BackendTutti::allgather_into_tensor_coalesced(std::vector<at::Tensor> &outputs,
                                                      std::vector<at::Tensor> &inputs,
                                                      const c10d::AllgatherOptions &opts)
{
    const std::string op = "allgather_into_tensor_coalesced";
    check_usable(op);
    if (inputs.empty() || inputs.size() != outputs.size())
        refuse(op, "needs as many outputs as inputs, at least one: got " +
                       std::to_string(outputs.size()) + " and " + std::to_string(inputs.size()));
    size_t total = 0;
    for (size_t i = 0; i < inputs.size(); i++) {
        check_gather_pair(op, outputs[i], inputs[i], size_);
        total += nbytes(inputs[i]);
    }
    Call c;
    c.type = c10d::OpType::ALLGATHER_COALESCED;
    c.name = op;
    c.hint = kBytesHint;
    c.outputs = outputs;
    c.comm = comm_;
    if (total <= kPackMax) {
        at::Tensor send = byte_buffer(total), recv = byte_buffer(total * size_);
        uint8_t *p = send.data_ptr<uint8_t>();
        for (const auto &t : inputs)
            bytes_out(t, p), p += nbytes(t);
        c.keep = {send, recv};
        std::vector<at::Tensor> outs = outputs;
        int size = size_;
        c.finalize = [outs, recv, total, size] {
            at::Tensor blocks = recv.view({size, static_cast<int64_t>(total)});
            int64_t off = 0;
            for (const auto &o : outs) {
                int64_t nb = static_cast<int64_t>(nbytes(o)) / size;
                at::Tensor part = blocks.narrow(1, off, nb); // [rank][bytes of this output]
                if (o.is_contiguous())
                    at::from_blob(o.data_ptr(), {size, nb}, at::TensorOptions(at::kByte))
                        .copy_(part);
                else
                    bytes_in(o, part.contiguous().data_ptr<uint8_t>());
                off += nb;
            }
        };
        c.posts.push_back(allgather_post(send.data_ptr(), recv.data_ptr(), total));
        return launch(std::move(c), opts.asyncOp, opts.timeout);
    }
    auto outs = std::make_shared<std::vector<Buf>>();
    for (size_t i = 0; i < inputs.size(); i++) {
        Buf bi(inputs[i], true);
        outs->emplace_back(outputs[i], false);
        if (!own_slot(bi.ptr(), outs->back().ptr(), nbytes(inputs[i]), rank_))
            bi.stage_if_overlapping(outs->back().ptr(), nbytes(outputs[i]), true);
        c.keep.push_back(bi.work);
        c.keep.push_back(outs->back().work);
        c.posts.push_back(allgather_post(bi.ptr(), outs->back().ptr(), nbytes(inputs[i])));
    }
    c.finalize = [outs] {
        for (const auto &b : *outs)
            b.copy_back();
    };
    return launch(std::move(c), opts.asyncOp, opts.timeout);
}

// Rows (dim 0) of input go to the ranks by inputSplitSizes (equal parts when empty); rows from
// each rank land in output by outputSplitSizes.
WorkPtr BackendTutti::alltoall_base(at::Tensor &output, at::Tensor &input,
                                    std::vector<int64_t> &outputSplitSizes,
                                    std::vector<int64_t> &inputSplitSizes,
                                    const c10d::AllToAllOptions &opts)
{
    const std::string op = "alltoall_base";
    check_usable(op);
    check_tensor(op, output);
    check_tensor(op, input);
    check_same_dtype(op, input, output);
    Call c;
    c.type = c10d::OpType::ALLTOALL_BASE;
    c.name = op;
    c.hint = kAlltoallHint;
    c.outputs = {output};
    c.comm = comm_;
    if (outputSplitSizes.empty() && inputSplitSizes.empty()) {
        if (input.numel() != output.numel() || input.numel() % size_ != 0)
            refuse(op, "without split sizes, input and output need the same number of elements, "
                       "divisible by the world size " + std::to_string(size_) + ": input " +
                           std::to_string(input.numel()) + ", output " +
                           std::to_string(output.numel()));
    }
    auto sc = split_bytes(op, "input", input, inputSplitSizes, size_);
    auto rc = split_bytes(op, "output", output, outputSplitSizes, size_);
    Buf bi(input, true), bo(output, false);
    // One tensor is tutti's in-place form only where every rank's block keeps its size (MPI's
    // in-place alltoallv sends what the receive counts say); other splits, or a partial
    // overlap, get an output of their own.
    if (bi.ptr() != bo.ptr() || sc != rc)
        bo.stage_if_overlapping(bi.ptr(), nbytes(input), false);
    c.keep = {bi.work, bo.work};
    if (bo.copied())
        c.finalize = [bo] { bo.copy_back(); };
    if (outputSplitSizes.empty() && inputSplitSizes.empty()) {
        const void *s = bi.ptr();
        void *r = bo.ptr();
        size_t nb = nbytes(input) / static_cast<size_t>(size_);
        c.posts.push_back([s, r, nb](tutti_comm_t *comm, tutti_work_t **h) {
            return tutti_alltoall(s, r, nb, TUTTI_UINT8, comm, h);
        });
    } else {
        c.posts.push_back(alltoallv_post(bi.ptr(), std::move(sc), bo.ptr(), std::move(rc)));
    }
    return launch(std::move(c), opts.asyncOp, opts.timeout);
}

// inputs[j] goes to rank j, outputs[j] comes from rank j; sizes may differ per peer.
WorkPtr BackendTutti::alltoall(std::vector<at::Tensor> &outputs, std::vector<at::Tensor> &inputs,
                               const c10d::AllToAllOptions &opts)
{
    const std::string op = "alltoall";
    check_usable(op);
    if (inputs.size() != static_cast<size_t>(size_) ||
        outputs.size() != static_cast<size_t>(size_))
        refuse(op, "needs one input and one output tensor per rank (" + std::to_string(size_) +
                       "), got " + std::to_string(inputs.size()) + " and " +
                       std::to_string(outputs.size()));
    std::vector<size_t> sc, rc;
    size_t stotal = 0, rtotal = 0;
    for (int j = 0; j < size_; j++) {
        check_tensor(op, inputs[j]);
        check_tensor(op, outputs[j]);
        check_same_dtype(op, inputs[j], outputs[j]);
        sc.push_back(nbytes(inputs[j]));
        rc.push_back(nbytes(outputs[j]));
        stotal += sc.back();
        rtotal += rc.back();
    }
    Call c;
    c.type = c10d::OpType::ALLTOALL;
    c.name = op;
    c.hint = kAlltoallHint;
    c.outputs = outputs;
    c.comm = comm_;
    at::Tensor send = byte_buffer(stotal), recv = byte_buffer(rtotal);
    uint8_t *p = send.data_ptr<uint8_t>();
    for (const auto &t : inputs)
        bytes_out(t, p), p += nbytes(t);
    c.keep = {send, recv};
    std::vector<at::Tensor> outs = outputs;
    c.finalize = [outs, recv] {
        const uint8_t *q = recv.data_ptr<uint8_t>();
        for (const auto &o : outs)
            bytes_in(o, q), q += nbytes(o);
    };
    c.posts.push_back(alltoallv_post(send.data_ptr(), std::move(sc), recv.data_ptr(),
                                     std::move(rc)));
    return launch(std::move(c), opts.asyncOp, opts.timeout);
}

WorkPtr BackendTutti::gather(std::vector<std::vector<at::Tensor>> &outputs,
                             std::vector<at::Tensor> &inputs, const c10d::GatherOptions &opts)
{
    const std::string op = "gather";
    check_usable(op);
    const at::Tensor &in = check_one(op, inputs);
    check_root(op, opts.rootRank, size_);
    int root = static_cast<int>(opts.rootRank);
    bool is_root = root == rank_;
    std::vector<at::Tensor> outs;
    if (is_root) {
        if (outputs.size() != 1)
            refuse(op, "the root takes one output list, got " + std::to_string(outputs.size()));
        outs = outputs[0];
        check_list(op, "output", outs, in, size_);
    } else if (!outputs.empty() && !(outputs.size() == 1 && outputs[0].empty())) {
        refuse(op, "only the root (rank " + std::to_string(root) +
                       ") passes output tensors; this is rank " + std::to_string(rank_));
    }
    size_t nb = nbytes(in);
    std::vector<size_t> sc(size_, 0), rc(size_, 0);
    sc[root] = nb;
    if (is_root)
        std::fill(rc.begin(), rc.end(), nb);
    Call c;
    c.type = c10d::OpType::GATHER;
    c.name = op;
    c.hint = kGatherHint;
    c.outputs = outs;
    c.comm = comm_;
    at::Tensor src = contiguous_bytes(in);
    void *recv = nullptr;
    if (is_root && adjacent(outs)) {
        recv = outs[0].data_ptr();
        c.keep = {src};
    } else if (is_root) {
        at::Tensor flat = byte_buffer(nb * size_);
        recv = flat.data_ptr();
        c.keep = {src, flat};
        c.finalize = [outs, flat, nb] {
            const uint8_t *q = flat.data_ptr<uint8_t>();
            for (const auto &o : outs)
                bytes_in(o, q), q += nb;
        };
    } else {
        c.keep = {src};
    }
    if (is_root && overlaps(src.data_ptr(), nb, recv, nb * outs.size())) {
        src = plain(src).clone(); // the root's input is a view into its outputs
        c.keep.push_back(src);
    }
    c.posts.push_back(alltoallv_post(src.data_ptr(), std::move(sc), recv, std::move(rc)));
    return launch(std::move(c), opts.asyncOp, opts.timeout);
}

WorkPtr BackendTutti::scatter(std::vector<at::Tensor> &outputs,
                              std::vector<std::vector<at::Tensor>> &inputs,
                              const c10d::ScatterOptions &opts)
{
    const std::string op = "scatter";
    check_usable(op);
    const at::Tensor &out = check_one(op, outputs);
    check_root(op, opts.rootRank, size_);
    int root = static_cast<int>(opts.rootRank);
    bool is_root = root == rank_;
    size_t nb = nbytes(out);
    Call c;
    c.type = c10d::OpType::SCATTER;
    c.name = op;
    c.hint = kScatterHint;
    c.outputs = {out};
    c.comm = comm_;
    at::Tensor send;
    if (is_root) {
        if (inputs.size() != 1)
            refuse(op, "the root takes one input list, got " + std::to_string(inputs.size()));
        check_list(op, "input", inputs[0], out, size_);
        if (adjacent(inputs[0])) {
            send = inputs[0][0];
            c.keep = inputs[0];
        } else {
            send = byte_buffer(nb * size_);
            uint8_t *p = send.data_ptr<uint8_t>();
            for (const auto &t : inputs[0])
                bytes_out(t, p), p += nb;
            c.keep = {send};
        }
    } else if (!inputs.empty() && !(inputs.size() == 1 && inputs[0].empty())) {
        refuse(op, "only the root (rank " + std::to_string(root) +
                       ") passes input tensors; this is rank " + std::to_string(rank_));
    }
    std::vector<size_t> sc(size_, 0), rc(size_, 0);
    if (is_root)
        std::fill(sc.begin(), sc.end(), nb);
    rc[root] = nb;
    Buf b(out, false);
    if (send.defined()) // the root's output may be a view into its inputs
        b.stage_if_overlapping(send.data_ptr(), nb * static_cast<size_t>(size_), false);
    c.keep.push_back(b.work);
    if (b.copied())
        c.finalize = [b] { b.copy_back(); };
    const void *sp = send.defined() ? send.data_ptr() : nullptr;
    c.posts.push_back(alltoallv_post(sp, std::move(sc), b.ptr(), std::move(rc)));
    return launch(std::move(c), opts.asyncOp, opts.timeout);
}

} // namespace tutti_torch
