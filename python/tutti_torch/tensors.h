// tensors.h: the tensor side of tutti_torch: checks of the tensors c10d hands over, torch
// dtypes and ReduceOps as tutti's (PREMUL_SUM and bool included), and buffers tutti reads and
// writes in place when the tensors allow it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <tutti.h>

namespace tutti_torch {

// dtype_name is the dtype as Python spells it ("torch.int32"), for error texts.
std::string dtype_name(at::ScalarType t);

// nbytes is the size of t's elements, packed.
size_t nbytes(const at::Tensor &t);

// The checks refuse (errors.h) with a text that names op and says what to pass instead.
void check_tensor(const std::string &op, const at::Tensor &t);
// check_one enforces c10d's contract of one tensor per call and returns it.
const at::Tensor &check_one(const std::string &op, const std::vector<at::Tensor> &ts);
void check_same_dtype(const std::string &op, const at::Tensor &a, const at::Tensor &b);
// check_list: size tensors, each of like's dtype and shape.
void check_list(const std::string &op, const char *what, const std::vector<at::Tensor> &ts,
                const at::Tensor &like, int size);
void check_root(const std::string &op, int64_t root, int size);

// dtype_of maps the dtypes tutti reduces; false for the others (data movement moves bytes and
// takes every dtype).
bool dtype_of(at::ScalarType t, tutti_dtype_t *out);

// Reduction is one c10d ReduceOp on one dtype as tutti runs it.
//  - bool travels as uint8: SUM, MAX and BOR are a logical or (MAX), PRODUCT, MIN and BAND a
//    logical and (MIN), BXOR stays; so every result is a valid bool, whatever the rank count.
//  - AVG is for floating types (torch refuses it on integers: the mean is not an integer).
//  - PREMUL_SUM (FSDP2's reduce-scatter with a divide factor): every rank's input is multiplied
//    by the factor first, by torch itself in the tensor's own dtype (exactly `x * factor`, one
//    rounding for bf16 and fp16), then tutti sums: the result is what summing the ranks'
//    `x * factor` gives, and fp16 inputs are scaled down before the sum can overflow.
struct Reduction {
    tutti_dtype_t dtype = TUTTI_FLOAT32;
    tutti_op_t op = TUTTI_SUM;
    bool premul = false;
    double factor = 1.0;       // PREMUL_SUM with a number
    at::Tensor tensor_factor;  // PREMUL_SUM with a one-element tensor
    size_t parts = 1;          // dtype elements per tensor element: 2 for a complex tensor,
                               // reduced as its real and imaginary parts (SUM, AVG, PREMUL_SUM)

    // count is the number of dtype elements in numel tensor elements.
    size_t count(int64_t numel) const { return static_cast<size_t>(numel) * parts; }

    // scaled is t * factor as a new tensor (PREMUL_SUM), else t itself.
    at::Tensor scaled(const at::Tensor &t) const;
    // scale_ multiplies t in place (PREMUL_SUM only).
    void scale_(const at::Tensor &t) const;
};

Reduction reduction_of(const std::string &op, const c10d::ReduceOp &rop, at::ScalarType t);

// plain is t viewed as the integer (or, for 16 bytes, complex128) dtype of its element size:
// the same bytes, shape and strides. Its copies are bitwise and exist for every dtype, where
// torch has no copy kernel for some (the bit and sub-byte dtypes, torch.uint1, torch.bits8, ...).
at::Tensor plain(const at::Tensor &t);
// contiguous_bytes is t if contiguous, else a contiguous copy of its bytes (as plain's dtype):
// what tutti reads when it sends t.
at::Tensor contiguous_bytes(const at::Tensor &t);

// Buf is a buffer tutti works on: the caller's tensor itself when it is contiguous (no copy),
// else a contiguous stand-in (holding t's values when read is true) whose result copy_back
// writes into the caller's tensor.
struct Buf {
    at::Tensor user, work;
    Buf() = default;
    Buf(const at::Tensor &t, bool read);
    void *ptr() const { return work.data_ptr(); }
    bool copied() const { return !work.is_same(user); }
    void copy_back() const;
    // stage_if_overlapping gives the buffer a stand-in of its own when its bytes share any
    // with [p, p + n) (torch's in-place forms: an output that is a view into the input), so
    // that tutti, which refuses partly overlapping buffers, gets two apart.
    void stage_if_overlapping(const void *p, size_t n, bool read);
};

// span_bytes is how many bytes t's elements span in memory from its first one (its nbytes when
// contiguous; more for a strided view, whose gaps it covers).
size_t span_bytes(const at::Tensor &t);

// overlaps: whether the byte ranges [a, a + an) and [b, b + bn) share a byte.
bool overlaps(const void *a, size_t an, const void *b, size_t bn);

// bytes_out copies t's elements, packed, to dst; bytes_in copies packed elements from src
// into t (t may be strided).
void bytes_out(const at::Tensor &t, uint8_t *dst);
void bytes_in(const at::Tensor &t, const uint8_t *src);

// adjacent: every tensor is contiguous and they lie back to back in memory, in order (views
// of one tensor, as torch.chunk makes), so that tutti can use them as one buffer.
bool adjacent(const std::vector<at::Tensor> &ts);

// byte_buffer is a fresh uint8 tensor of n bytes.
at::Tensor byte_buffer(size_t n);

// split_bytes turns split sizes (rows of dim 0 per rank; empty: equal parts) into byte counts
// per rank, refusing sizes that do not fit t.
std::vector<size_t> split_bytes(const std::string &op, const char *what, const at::Tensor &t,
                                const std::vector<int64_t> &splits, int size);

} // namespace tutti_torch
