// reductions.cpp: BackendTutti's reductions: allreduce (single and coalesced), reduce,
// reduce_scatter (list, tensor and coalesced tensor forms). Every ReduceOp tensors.h maps,
// PREMUL_SUM by scaling each rank's input first (by torch, in the tensor's dtype) and summing.
#include "backend.h"

#include <memory>

#include "errors.h"
#include "tensors.h"

namespace tutti_torch {

WorkPtr BackendTutti::allreduce(std::vector<at::Tensor> &tensors,
                                const c10d::AllreduceOptions &opts)
{
    const std::string op = "allreduce";
    check_usable(op);
    const at::Tensor &t = check_one(op, tensors);
    Reduction r = reduction_of(op, opts.reduceOp, t.scalar_type());
    Buf b(t, true);
    Call c;
    if (r.premul) // in place: the result replaces the input anyway
        c.prepare = [r, w = b.work] { r.scale_(w); };
    c.type = c10d::OpType::ALLREDUCE;
    c.name = op;
    c.outputs = {t};
    c.comm = comm_;
    c.keep = {b.work};
    if (b.copied())
        c.finalize = [b] { b.copy_back(); };
    void *p = b.ptr();
    size_t n = r.count(t.numel());
    tutti_dtype_t dt = r.dtype;
    tutti_op_t rop = r.op;
    c.posts.push_back([p, n, dt, rop](tutti_comm_t *comm, tutti_work_t **h) {
        return tutti_allreduce(p, p, n, dt, rop, comm, h);
    });
    c.merge = Call::Merge{p, n, dt, rop};
    return launch(std::move(c), opts.asyncOp, opts.timeout);
}

// Several tensors, one tutti_allreduce_coalesced per dtype among them (in the order each dtype
// first appears, the same on every rank), all in one Work.
WorkPtr BackendTutti::allreduce_coalesced(std::vector<at::Tensor> &tensors,
                                          const c10d::AllreduceCoalescedOptions &opts)
{
    const std::string op = "allreduce_coalesced";
    check_usable(op);
    if (tensors.empty())
        refuse(op, "got no tensors");
    std::vector<at::ScalarType> types;
    std::vector<std::vector<size_t>> groups;
    std::vector<Reduction> rs;
    for (size_t i = 0; i < tensors.size(); i++) {
        check_tensor(op, tensors[i]);
        size_t g = 0;
        while (g < types.size() && types[g] != tensors[i].scalar_type())
            g++;
        if (g == types.size()) {
            types.push_back(tensors[i].scalar_type());
            rs.push_back(reduction_of(op, opts.reduceOp, types.back()));
            groups.emplace_back();
        }
        groups[g].push_back(i);
    }
    Call c;
    c.type = c10d::OpType::ALLREDUCE_COALESCED;
    c.name = op;
    c.outputs = tensors;
    c.comm = comm_;
    auto bufs = std::make_shared<std::vector<Buf>>();
    bool any_copied = false;
    for (const auto &t : tensors)
        bufs->emplace_back(t, true);
    // PREMUL_SUM scales each buffer in place: an element that two tensors of the list share
    // would be scaled twice, so those tensors get copies of their own (before any scaling).
    for (size_t i = 0; rs[0].premul && i < tensors.size(); i++)
        for (size_t j = 0; j < tensors.size(); j++)
            if (j != i)
                (*bufs)[i].stage_if_overlapping(tensors[j].data_ptr(), span_bytes(tensors[j]),
                                                true);
    auto scale = std::make_shared<std::vector<std::pair<Reduction, at::Tensor>>>();
    for (size_t g = 0; g < groups.size(); g++) {
        const Reduction &r = rs[g];
        auto ptrs = std::make_shared<std::vector<void *>>();
        auto counts = std::make_shared<std::vector<size_t>>();
        for (size_t i : groups[g]) {
            Buf &b = (*bufs)[i];
            if (r.premul)
                scale->emplace_back(r, b.work);
            ptrs->push_back(b.ptr());
            counts->push_back(r.count(b.user.numel()));
            c.keep.push_back(b.work);
            any_copied = any_copied || b.copied();
        }
        tutti_dtype_t dt = r.dtype;
        tutti_op_t rop = r.op;
        c.posts.push_back([ptrs, counts, dt, rop](tutti_comm_t *comm, tutti_work_t **h) {
            return tutti_allreduce_coalesced(nullptr, ptrs->data(), counts->data(),
                                             static_cast<int>(ptrs->size()), dt, rop, comm, h);
        });
    }
    if (any_copied)
        c.finalize = [bufs] {
            for (const auto &b : *bufs)
                b.copy_back();
        };
    if (!scale->empty())
        c.prepare = [scale] {
            for (const auto &[r, w] : *scale)
                r.scale_(w);
        };
    return launch(std::move(c), opts.asyncOp, opts.timeout);
}

WorkPtr BackendTutti::reduce(std::vector<at::Tensor> &tensors, const c10d::ReduceOptions &opts)
{
    const std::string op = "reduce";
    check_usable(op);
    const at::Tensor &t = check_one(op, tensors);
    check_root(op, opts.rootRank, size_);
    if (opts.rootTensor != 0)
        refuse(op, "rootTensor must be 0 (one tensor per call)");
    Reduction r = reduction_of(op, opts.reduceOp, t.scalar_type());
    bool root = opts.rootRank == rank_;
    Buf b(t, true);
    // Only the root's tensor changes; with PREMUL_SUM the scaled input is a copy.
    at::Tensor send = r.scaled(b.work);
    Call c;
    c.type = c10d::OpType::REDUCE;
    c.name = op;
    c.outputs = {t};
    c.comm = comm_;
    c.keep = {b.work, send};
    if (b.copied() && root)
        c.finalize = [b] { b.copy_back(); };
    const void *sp = send.data_ptr();
    void *rp = root ? b.ptr() : nullptr;
    size_t n = r.count(t.numel());
    tutti_dtype_t dt = r.dtype;
    tutti_op_t rop = r.op;
    int rr = static_cast<int>(opts.rootRank);
    c.posts.push_back([sp, rp, n, dt, rop, rr](tutti_comm_t *comm, tutti_work_t **h) {
        return tutti_reduce(sp, rp, n, dt, rop, rr, comm, h);
    });
    return launch(std::move(c), opts.asyncOp, opts.timeout);
}

// The reduce-scatter of `send` (size blocks of n elements, block j for rank j) into out.
static PostFn reduce_scatter_post(const void *send, void *recv, size_t n, const Reduction &r)
{
    tutti_dtype_t dt = r.dtype;
    tutti_op_t rop = r.op;
    return [send, recv, n, dt, rop](tutti_comm_t *comm, tutti_work_t **h) {
        return tutti_reduce_scatter(send, recv, n, dt, rop, comm, h);
    };
}

static bool same_numel(const std::vector<at::Tensor> &ts)
{
    for (const auto &t : ts)
        if (t.numel() != ts[0].numel())
            return false;
    return true;
}

// Inputs of different sizes (Gloo takes them: input j holds rank j's block, and every rank
// passes the same sizes): each block is padded to the largest, the padded blocks are
// reduce-scattered, and this rank's block is cut back to its size. A rank whose largest block
// differs posts another count (a mismatch on every rank); the padding is never read back.
WorkPtr BackendTutti::reduce_scatter_uneven(const at::Tensor &out, const std::vector<at::Tensor> &in,
                                            const c10d::ReduceScatterOptions &opts)
{
    const std::string op = "reduce_scatter";
    int64_t m = 0;
    for (const auto &t : in) {
        check_tensor(op, t);
        check_same_dtype(op, out, t);
        m = std::max(m, t.numel());
    }
    if (in[static_cast<size_t>(rank_)].numel() != out.numel())
        refuse(op, "the output must have as many elements as this rank's input (input " +
                       std::to_string(rank_) + ", " +
                       std::to_string(in[static_cast<size_t>(rank_)].numel()) +
                       "), got " + std::to_string(out.numel()));
    Reduction r = reduction_of(op, opts.reduceOp, out.scalar_type());
    at::Tensor send = at::zeros({m * size_}, out.options());
    for (size_t j = 0; j < in.size(); j++)
        send.narrow(0, static_cast<int64_t>(j) * m, in[j].numel()).copy_(in[j].reshape({-1}));
    r.scale_(send);
    at::Tensor recv = at::empty({m}, out.options());
    Call c;
    c.type = c10d::OpType::REDUCE_SCATTER;
    c.name = op;
    c.outputs = {out};
    c.comm = comm_;
    c.keep = {send, recv};
    at::Tensor dst = out;
    c.finalize = [dst, recv]() mutable {
        dst.copy_(recv.narrow(0, 0, dst.numel()).view(dst.sizes()));
    };
    c.posts.push_back(reduce_scatter_post(send.data_ptr(), recv.data_ptr(), r.count(m), r));
    return launch(std::move(c), opts.asyncOp, opts.timeout);
}

WorkPtr BackendTutti::reduce_scatter(std::vector<at::Tensor> &outputs,
                                     std::vector<std::vector<at::Tensor>> &inputs,
                                     const c10d::ReduceScatterOptions &opts)
{
    const std::string op = "reduce_scatter";
    check_usable(op);
    const at::Tensor &out = check_one(op, outputs);
    if (inputs.size() != 1)
        refuse(op, "takes one input list per call, got " + std::to_string(inputs.size()));
    const auto &in = inputs[0];
    if (in.size() == static_cast<size_t>(size_) && !same_numel(in))
        return reduce_scatter_uneven(out, in, opts);
    check_list(op, "input", in, out, size_);
    Reduction r = reduction_of(op, opts.reduceOp, out.scalar_type());
    Call c;
    c.type = c10d::OpType::REDUCE_SCATTER;
    c.name = op;
    c.outputs = {out};
    c.comm = comm_;
    at::Tensor send;
    if (adjacent(in) && !r.premul) {
        send = in[0]; // views of one tensor (torch.chunk): read in place
        c.keep = in;
    } else {
        std::vector<at::Tensor> flat;
        for (const auto &t : in)
            flat.push_back(t.reshape({-1}));
        send = at::cat(flat);
        r.scale_(send);
        c.keep = {send};
    }
    Buf b(out, false);
    b.stage_if_overlapping(send.data_ptr(), nbytes(out) * static_cast<size_t>(size_), false);
    c.keep.push_back(b.work);
    if (b.copied())
        c.finalize = [b] { b.copy_back(); };
    c.posts.push_back(reduce_scatter_post(send.data_ptr(), b.ptr(), r.count(out.numel()), r));
    return launch(std::move(c), opts.asyncOp, opts.timeout);
}

// check_scatter_pair: input holds world size times output's elements, of one dtype.
static void check_scatter_pair(const std::string &op, const at::Tensor &output,
                               const at::Tensor &input, int size)
{
    check_tensor(op, output);
    check_tensor(op, input);
    check_same_dtype(op, input, output);
    if (input.numel() != output.numel() * size)
        refuse(op, "the input must hold world size (" + std::to_string(size) +
                       ") times the output's elements: input " + std::to_string(input.numel()) +
                       ", output " + std::to_string(output.numel()));
}

WorkPtr BackendTutti::_reduce_scatter_base(at::Tensor &output, at::Tensor &input,
                                           const c10d::ReduceScatterOptions &opts)
{
    const std::string op = "_reduce_scatter_base";
    check_usable(op);
    check_scatter_pair(op, output, input, size_);
    Reduction r = reduction_of(op, opts.reduceOp, output.scalar_type());
    Buf bi(input, true), bo(output, false);
    at::Tensor send = r.scaled(bi.work); // a scaled copy: the input stays as it was
    bo.stage_if_overlapping(send.data_ptr(), nbytes(send), false); // output = input.chunk(n)[r]
    Call c;
    c.type = c10d::OpType::_REDUCE_SCATTER_BASE;
    c.name = op;
    c.outputs = {output};
    c.comm = comm_;
    c.keep = {send, bo.work};
    if (bo.copied())
        c.finalize = [bo] { bo.copy_back(); };
    c.posts.push_back(reduce_scatter_post(send.data_ptr(), bo.ptr(), r.count(output.numel()), r));
    return launch(std::move(c), opts.asyncOp, opts.timeout);
}

// Small in all: the inputs are packed rank block by rank block ([input 0's block j | input 1's
// block j | ...] for rank j), reduce-scattered at once, and the result is cut back into the
// outputs. Large: one reduce-scatter per pair, in place.
WorkPtr BackendTutti::reduce_scatter_tensor_coalesced(std::vector<at::Tensor> &outputs,
                                                      std::vector<at::Tensor> &inputs,
                                                      const c10d::ReduceScatterOptions &opts)
{
    const std::string op = "reduce_scatter_tensor_coalesced";
    check_usable(op);
    if (inputs.empty() || inputs.size() != outputs.size())
        refuse(op, "needs as many outputs as inputs, at least one: got " +
                       std::to_string(outputs.size()) + " and " + std::to_string(inputs.size()));
    size_t total = 0, bytes = 0;
    bool one_dtype = true;
    std::vector<Reduction> rs;
    for (size_t i = 0; i < inputs.size(); i++) {
        check_scatter_pair(op, outputs[i], inputs[i], size_);
        one_dtype = one_dtype && inputs[i].scalar_type() == inputs[0].scalar_type();
        rs.push_back(reduction_of(op, opts.reduceOp, inputs[i].scalar_type()));
        total += static_cast<size_t>(outputs[i].numel());
        bytes += nbytes(inputs[i]);
    }
    const Reduction &r = rs[0];
    Call c;
    c.type = c10d::OpType::REDUCE_SCATTER_TENSOR_COALESCED;
    c.name = op;
    c.outputs = outputs;
    c.comm = comm_;
    // Small tensors of one dtype go packed, as one reduce-scatter; the rest (large, or of
    // several dtypes: gloo takes those too) one reduce-scatter per tensor, in one Work.
    if (bytes <= kPackMax && one_dtype) {
        auto options = inputs[0].options();
        at::Tensor send = at::empty({static_cast<int64_t>(total) * size_}, options);
        at::Tensor blocks = send.view({size_, static_cast<int64_t>(total)});
        int64_t off = 0;
        for (const auto &in : inputs) {
            int64_t n = in.numel() / size_;
            blocks.narrow(1, off, n).copy_(in.reshape({size_, n}));
            off += n;
        }
        r.scale_(send);
        at::Tensor recv = at::empty({static_cast<int64_t>(total)}, options);
        c.keep = {send, recv};
        std::vector<at::Tensor> outs = outputs;
        c.finalize = [outs, recv] {
            int64_t o = 0;
            for (const auto &t : outs) {
                t.copy_(recv.narrow(0, o, t.numel()).view(t.sizes()));
                o += t.numel();
            }
        };
        c.posts.push_back(reduce_scatter_post(send.data_ptr(), recv.data_ptr(),
                                              r.count(static_cast<int64_t>(total)), r));
        return launch(std::move(c), opts.asyncOp, opts.timeout);
    }
    auto outs = std::make_shared<std::vector<Buf>>();
    for (size_t i = 0; i < inputs.size(); i++) {
        Buf bi(inputs[i], true);
        at::Tensor send = rs[i].scaled(bi.work);
        outs->emplace_back(outputs[i], false);
        outs->back().stage_if_overlapping(send.data_ptr(), nbytes(send), false);
        c.keep.push_back(send);
        c.keep.push_back(outs->back().work);
        c.posts.push_back(reduce_scatter_post(send.data_ptr(), outs->back().ptr(),
                                              rs[i].count(outputs[i].numel()), rs[i]));
    }
    c.finalize = [outs] {
        for (const auto &b : *outs)
            b.copy_back();
    };
    return launch(std::move(c), opts.asyncOp, opts.timeout);
}

} // namespace tutti_torch
