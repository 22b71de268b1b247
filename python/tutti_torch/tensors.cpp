// tensors.cpp: tensor checks, dtype and ReduceOp mapping, and buffers (see tensors.h).
#include "tensors.h"

#include <cctype>
#include <cstring>

#include <ATen/ScalarOps.h>

#include "errors.h"

namespace tutti_torch {

std::string dtype_name(at::ScalarType t)
{
    switch (t) {
    case at::kBool: return "torch.bool";
    case at::kByte: return "torch.uint8";
    case at::kChar: return "torch.int8";
    case at::kShort: return "torch.int16";
    case at::kInt: return "torch.int32";
    case at::kLong: return "torch.int64";
    case at::kHalf: return "torch.float16";
    case at::kBFloat16: return "torch.bfloat16";
    case at::kFloat: return "torch.float32";
    case at::kDouble: return "torch.float64";
    case at::kComplexHalf: return "torch.complex32";
    case at::kComplexFloat: return "torch.complex64";
    case at::kComplexDouble: return "torch.complex128";
    case at::kUInt16: return "torch.uint16";
    case at::kUInt32: return "torch.uint32";
    case at::kUInt64: return "torch.uint64";
    default: { // torch's Python names are ATen's, lower-cased (torch.float8_e4m3fn)
        std::string s = c10::toString(t);
        for (auto &ch : s)
            ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
        return "torch." + s;
    }
    }
}

size_t nbytes(const at::Tensor &t)
{
    return static_cast<size_t>(t.numel()) * t.element_size();
}

void check_tensor(const std::string &op, const at::Tensor &t)
{
    if (!t.defined())
        refuse(op, "got an undefined tensor");
    if (!t.device().is_cpu())
        refuse(op, "tensors must be on the CPU, got one on " + t.device().str() +
                       "; tutti is a CPU backend (use \"cpu:tutti,cuda:nccl\" for both)");
    if (t.layout() != at::kStrided)
        refuse(op, "only dense (strided) tensors are supported, not sparse or other layouts");
}

const at::Tensor &check_one(const std::string &op, const std::vector<at::Tensor> &ts)
{
    if (ts.size() != 1)
        refuse(op, "takes exactly one tensor per call (c10d's one-device-per-process contract), "
                   "got " + std::to_string(ts.size()) +
                       (op.rfind("allreduce", 0) == 0 ? "; use allreduce_coalesced for several"
                                                      : ""));
    check_tensor(op, ts[0]);
    return ts[0];
}

void check_same_dtype(const std::string &op, const at::Tensor &a, const at::Tensor &b)
{
    if (a.scalar_type() != b.scalar_type())
        refuse(op, "input and output dtypes differ: " + dtype_name(a.scalar_type()) + " and " +
                       dtype_name(b.scalar_type()));
}

static std::string shape_text(const at::Tensor &t)
{
    std::string s = "(";
    for (int64_t d = 0; d < t.dim(); d++)
        s += (d ? ", " : "") + std::to_string(t.size(d));
    return s + (t.dim() == 1 ? ",)" : ")");
}

void check_list(const std::string &op, const char *what, const std::vector<at::Tensor> &ts,
                const at::Tensor &like, int size)
{
    if (ts.size() != static_cast<size_t>(size))
        refuse(op, std::string("needs one ") + what + " tensor per rank (" +
                       std::to_string(size) + "), got " + std::to_string(ts.size()));
    for (size_t i = 0; i < ts.size(); i++) {
        const at::Tensor &t = ts[i];
        check_tensor(op, t);
        check_same_dtype(op, like, t);
        // The shape, as Gloo does: the same count in another shape is most likely a mistake,
        // and a copy in row-major order would hide it.
        if (t.sizes() != like.sizes())
            refuse(op, std::string("every ") + what + " tensor must have the shape " +
                           shape_text(like) + ", got " + shape_text(t) + " at index " +
                           std::to_string(i));
    }
}

void check_root(const std::string &op, int64_t root, int size)
{
    if (root < 0 || root >= size)
        refuse(op, "root rank " + std::to_string(root) + " is out of range 0.." +
                       std::to_string(size - 1));
}

bool dtype_of(at::ScalarType t, tutti_dtype_t *out)
{
    switch (t) {
    case at::kChar: *out = TUTTI_INT8; return true;
    case at::kByte: *out = TUTTI_UINT8; return true;
    case at::kInt: *out = TUTTI_INT32; return true;
    case at::kLong: *out = TUTTI_INT64; return true;
    case at::kHalf: *out = TUTTI_FLOAT16; return true;
    case at::kBFloat16: *out = TUTTI_BFLOAT16; return true;
    case at::kFloat: *out = TUTTI_FLOAT32; return true;
    case at::kDouble: *out = TUTTI_FLOAT64; return true;
    default: return false;
    }
}


static const char *op_name(c10d::ReduceOp::RedOpType op)
{
    switch (op) {
    case c10d::ReduceOp::SUM: return "SUM";
    case c10d::ReduceOp::AVG: return "AVG";
    case c10d::ReduceOp::PRODUCT: return "PRODUCT";
    case c10d::ReduceOp::MIN: return "MIN";
    case c10d::ReduceOp::MAX: return "MAX";
    case c10d::ReduceOp::BAND: return "BAND";
    case c10d::ReduceOp::BOR: return "BOR";
    case c10d::ReduceOp::BXOR: return "BXOR";
    case c10d::ReduceOp::PREMUL_SUM: return "PREMUL_SUM";
    default: return "an unknown ReduceOp";
    }
}

Reduction reduction_of(const std::string &op, const c10d::ReduceOp &rop, at::ScalarType t)
{
    Reduction r;
    const std::string dt = dtype_name(t);
    if (t == at::kBool) {
        r.dtype = TUTTI_UINT8;
        switch (rop.op_) {
        case c10d::ReduceOp::SUM:
        case c10d::ReduceOp::MAX:
        case c10d::ReduceOp::BOR: r.op = TUTTI_MAX; return r;
        case c10d::ReduceOp::PRODUCT:
        case c10d::ReduceOp::MIN:
        case c10d::ReduceOp::BAND: r.op = TUTTI_MIN; return r;
        case c10d::ReduceOp::BXOR: r.op = TUTTI_BXOR; return r;
        default:
            refuse(op, std::string(op_name(rop.op_)) + " on a bool tensor has no bool result; "
                       "bool tensors take SUM, MAX, BOR (logical or), PRODUCT, MIN, BAND "
                       "(logical and) and BXOR");
        }
    }
    if (at::isComplexType(t)) {
        // Sums of complex numbers are sums of their parts: the tensor is reduced as twice as
        // many reals (as torch's all_reduce does by a view before it reaches a backend, and as
        // Gloo does for reduce and reduce_scatter). Products, minima and maxima are not.
        const c10d::ReduceOp::RedOpType o = rop.op_;
        if (o != c10d::ReduceOp::SUM && o != c10d::ReduceOp::AVG &&
            o != c10d::ReduceOp::PREMUL_SUM)
            refuse(op, std::string(op_name(o)) + " of a " + dt + " tensor: complex tensors are "
                       "reduced by SUM, AVG and PREMUL_SUM only (a product or an order of "
                       "complex numbers is not one of their parts)");
        Reduction real = reduction_of(op, rop, c10::toRealValueType(t));
        real.parts = 2;
        return real;
    }
    if (!dtype_of(t, &r.dtype))
        refuse(op, "dtype " + dt + " cannot be reduced by tutti; it reduces bool, int8, uint8, "
                   "int32, int64, float16, bfloat16, float32 and float64, and complex by SUM, "
                   "AVG and PREMUL_SUM: convert the tensor first (broadcast, gather and the other "
                   "data movements take every dtype)");
    bool fp = at::isFloatingType(t);
    switch (rop.op_) {
    case c10d::ReduceOp::SUM: r.op = TUTTI_SUM; break;
    case c10d::ReduceOp::PRODUCT: r.op = TUTTI_PROD; break;
    case c10d::ReduceOp::MIN: r.op = TUTTI_MIN; break;
    case c10d::ReduceOp::MAX: r.op = TUTTI_MAX; break;
    case c10d::ReduceOp::AVG:
        if (!fp)
            refuse(op, "AVG of a " + dt + " tensor: the mean of integers is not an integer "
                       "(torch refuses it for Gloo too); use SUM and divide, or a floating-point "
                       "tensor");
        r.op = TUTTI_AVG;
        break;
    case c10d::ReduceOp::BAND:
    case c10d::ReduceOp::BOR:
    case c10d::ReduceOp::BXOR:
        if (fp)
            refuse(op, std::string(op_name(rop.op_)) + " needs an integer or bool tensor, not " +
                           dt);
        r.op = rop.op_ == c10d::ReduceOp::BAND  ? TUTTI_BAND
               : rop.op_ == c10d::ReduceOp::BOR ? TUTTI_BOR
                                                : TUTTI_BXOR;
        break;
    case c10d::ReduceOp::PREMUL_SUM: {
        if (!fp)
            refuse(op, "PREMUL_SUM needs a floating-point tensor, not " + dt);
        // The only supplement c10d defines is PreMulSumSupplement (as ProcessGroupNCCL assumes).
        auto *s = static_cast<const c10d::PreMulSumSupplement *>(rop.supplement_.get());
        if (s == nullptr)
            refuse(op, "PREMUL_SUM came without its factor; make it with "
                       "torch.distributed._make_nccl_premul_sum(factor)");
        r.premul = true;
        r.op = TUTTI_SUM;
        if (s->tensor_factor.defined()) {
            if (!s->tensor_factor.device().is_cpu() || s->tensor_factor.numel() != 1)
                refuse(op, "the PREMUL_SUM factor must be a number or a one-element CPU tensor, "
                           "got a tensor of " + std::to_string(s->tensor_factor.numel()) +
                               " elements on " + s->tensor_factor.device().str());
            if (at::isComplexType(s->tensor_factor.scalar_type()))
                refuse(op, "the PREMUL_SUM factor must be real, got a " +
                               std::string(c10::toString(s->tensor_factor.scalar_type())) +
                               " tensor");
            // 0-dim: a one-element 1-D factor would take part in type promotion like a tensor
            // of the input's rank, and `x * factor` would come out in the factor's dtype.
            r.tensor_factor = s->tensor_factor.reshape({});
        } else {
            r.factor = s->double_factor;
        }
        break;
    }
    default:
        refuse(op, "ReduceOp " + std::to_string(static_cast<int>(rop.op_)) +
                       " is not one tutti knows (SUM, AVG, PRODUCT, MIN, MAX, BAND, BOR, BXOR, "
                       "PREMUL_SUM)");
    }
    return r;
}

// The factor as the operand Python's `x * factor` multiplies by: a number becomes a wrapped
// scalar tensor, which torch applies in the tensor's compute type (float for bf16 and fp16).
// (ATen's mul(Scalar) would round the factor to bf16 first: a different result.)
static at::Tensor factor_operand(const Reduction &r)
{
    return r.tensor_factor.defined() ? r.tensor_factor : at::native::wrapped_scalar_tensor(r.factor);
}

at::Tensor Reduction::scaled(const at::Tensor &t) const
{
    if (!premul)
        return t;
    // Into a tensor of t's own dtype: tutti reads the copy's bytes as t's elements, so it must
    // not come out promoted (an fp32 factor on bf16 input, an fp64 one on fp32), whatever
    // factor torch's promotion rules would widen it to. One rounding, as scale_ does.
    at::Tensor out = at::empty_like(t, at::MemoryFormat::Contiguous);
    at::mul_out(out, t, factor_operand(*this));
    return out;
}

void Reduction::scale_(const at::Tensor &t) const
{
    if (premul)
        t.mul_(factor_operand(*this));
}

at::Tensor plain(const at::Tensor &t)
{
    switch (t.element_size()) {
    case 1:
        return t.view(at::kByte);
    case 2:
        return t.view(at::kShort);
    case 4:
        return t.view(at::kInt);
    case 8:
        return t.view(at::kLong);
    case 16:
        return t.view(at::kComplexDouble);
    default:
        return t; // torch has no other element size
    }
}

at::Tensor contiguous_bytes(const at::Tensor &t)
{
    return t.is_contiguous() ? t : plain(t).contiguous();
}

Buf::Buf(const at::Tensor &t, bool read) : user(t)
{
    if (t.is_contiguous()) {
        work = t;
        return;
    }
    work = at::empty(t.sizes(), t.options());
    if (read)
        plain(work).copy_(plain(t));
}

size_t span_bytes(const at::Tensor &t)
{
    if (t.numel() == 0)
        return 0;
    int64_t last = 0; // torch's strides are never negative
    for (int64_t d = 0; d < t.dim(); d++)
        last += (t.size(d) - 1) * t.stride(d);
    return static_cast<size_t>(last + 1) * t.element_size();
}

bool overlaps(const void *a, size_t an, const void *b, size_t bn)
{
    const auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
    return an > 0 && bn > 0 && x < y + bn && y < x + an;
}

void Buf::stage_if_overlapping(const void *p, size_t n, bool read)
{
    if (copied() || !overlaps(work.data_ptr(), nbytes(work), p, n))
        return;
    work = at::empty(user.sizes(), user.options());
    if (read)
        plain(work).copy_(plain(user));
}

void Buf::copy_back() const
{
    if (copied())
        plain(user).copy_(plain(work));
}

void bytes_out(const at::Tensor &t, uint8_t *dst)
{
    size_t n = nbytes(t);
    if (n == 0)
        return;
    at::Tensor c = contiguous_bytes(t);
    std::memcpy(dst, c.data_ptr(), n);
}

void bytes_in(const at::Tensor &t, const uint8_t *src)
{
    size_t n = nbytes(t);
    if (n == 0)
        return;
    if (t.is_contiguous()) {
        std::memcpy(t.data_ptr(), src, n);
    } else {
        at::Tensor p = plain(t);
        at::Tensor view = at::from_blob(const_cast<uint8_t *>(src), t.sizes(),
                                        p.options().device(at::kCPU));
        p.copy_(view);
    }
}

bool adjacent(const std::vector<at::Tensor> &ts)
{
    if (ts.empty())
        return false;
    const uint8_t *next = nullptr;
    for (const auto &t : ts) {
        if (!t.is_contiguous())
            return false;
        const uint8_t *p = static_cast<const uint8_t *>(t.data_ptr());
        if (next != nullptr && p != next)
            return false;
        next = p + nbytes(t);
    }
    return true;
}

at::Tensor byte_buffer(size_t n)
{
    return at::empty({static_cast<int64_t>(n)}, at::TensorOptions().dtype(at::kByte));
}

std::vector<size_t> split_bytes(const std::string &op, const char *what, const at::Tensor &t,
                                const std::vector<int64_t> &splits, int size)
{
    int64_t rows = t.dim() > 0 ? t.size(0) : 1;
    size_t row_bytes = rows > 0 ? nbytes(t) / static_cast<size_t>(rows) : 0;
    std::vector<size_t> out(size);
    if (splits.empty()) {
        if (rows % size != 0)
            refuse(op, std::string("the ") + what + "'s " + std::to_string(rows) +
                           " rows do not split equally over " + std::to_string(size) +
                           " ranks; pass split sizes");
        std::fill(out.begin(), out.end(), row_bytes * static_cast<size_t>(rows / size));
        return out;
    }
    if (splits.size() != static_cast<size_t>(size))
        refuse(op, std::string(what) + " split sizes need one entry per rank (" +
                       std::to_string(size) + "), got " + std::to_string(splits.size()));
    int64_t sum = 0;
    for (int j = 0; j < size; j++) {
        if (splits[j] < 0)
            refuse(op, std::string(what) + " split size " + std::to_string(splits[j]) +
                           " is negative");
        sum += splits[j];
        out[j] = row_bytes * static_cast<size_t>(splits[j]);
    }
    if (sum != rows)
        refuse(op, std::string(what) + " split sizes add up to " + std::to_string(sum) +
                       " rows, but the tensor has " + std::to_string(rows));
    return out;
}

} // namespace tutti_torch
