// p2p.cpp: BackendTutti's point-to-point calls, send, recv and recvAnysource, as tutti_send and
// tutti_recv on the group's own communicator, where tutti's point-to-point engine runs them
// apart from the collectives and from each other, with MPI's matching: a receive from rank p
// with tag t meets the earliest message p sent here with tag t that no earlier receive met, and
// recvAnysource (tutti_recv from TUTTI_ANY_SOURCE) the earliest to arrive with its tag from any
// rank, Work.sourceRank() naming the sender. Messages travel as bytes, so every dtype goes;
// a receive must have the message's exact size in bytes, else its Work fails, naming both sizes,
// and the group stays usable. Tags are torch's own, any int >= 0 (tutti keeps negative values
// for wildcards): a negative tag is refused here. Every call is posted (c10d's point-to-point
// calls have no asyncOp): torch waits on the Work when the caller does.
#include "backend.h"

#include <climits>

#include "errors.h"
#include "tensors.h"

namespace tutti_torch {

// check_peer and check_tag refuse here, in the caller's thread, what tutti_send / tutti_recv
// would refuse at their post: inside a coalescing block (batch_isend_irecv) the post comes only
// at endCoalescing, too late to tell the caller which call was wrong.
static void check_peer(const std::string &op, int peer, int rank, int size)
{
    if (peer < 0 || peer >= size)
        refuse(op, "peer rank " + std::to_string(peer) + " is out of range 0.." +
                       std::to_string(size - 1) + " of this group");
    if (peer == rank)
        refuse(op, "peer " + std::to_string(peer) + " is this rank; tutti does not send to itself "
                   "(copy the tensor instead)");
}

static void check_tag(const std::string &op, int tag)
{
    if (tag < 0)
        refuse(op, "tag " + std::to_string(tag) + " is negative; tutti's tags are 0.." +
                       std::to_string(INT_MAX) + " (negative values are reserved for wildcards)");
}

WorkPtr BackendTutti::send(std::vector<at::Tensor> &tensors, int dstRank, int tag)
{
    const std::string op = "send";
    check_usable(op);
    const at::Tensor &t = check_one(op, tensors);
    check_peer(op, dstRank, rank_, size_);
    check_tag(op, tag);
    at::Tensor src = contiguous_bytes(t);
    Call c;
    c.type = c10d::OpType::SEND;
    c.name = op;
    c.outputs = {t};
    c.comm = comm_;
    c.keep = {src};
    const void *p = src.data_ptr();
    size_t n = nbytes(t);
    c.posts.push_back([p, n, dstRank, tag](tutti_comm_t *cm, tutti_work_t **h) {
        return tutti_send(p, n, TUTTI_UINT8, dstRank, tag, cm, h);
    });
    return launch(std::move(c), true);
}

// receive posts a receive into tensors' one tensor from peer, a rank of this group or
// TUTTI_ANY_SOURCE; a non-contiguous tensor receives through a contiguous stand-in.
WorkPtr BackendTutti::receive(const std::string &op, c10d::OpType type,
                              std::vector<at::Tensor> &tensors, int peer, int tag)
{
    check_usable(op);
    const at::Tensor &t = check_one(op, tensors);
    if (peer != TUTTI_ANY_SOURCE)
        check_peer(op, peer, rank_, size_);
    check_tag(op, tag);
    if (peer == TUTTI_ANY_SOURCE && size_ < 2)
        refuse(op, "this group has one rank: no other rank can send to it");
    Buf b(t, false);
    Call c;
    c.type = type;
    c.name = op;
    c.outputs = {t};
    c.comm = comm_;
    c.keep = {b.work};
    if (b.copied())
        c.finalize = [b] { b.copy_back(); };
    void *p = b.ptr();
    size_t n = nbytes(t);
    c.posts.push_back([p, n, peer, tag](tutti_comm_t *cm, tutti_work_t **h) {
        return tutti_recv(p, n, TUTTI_UINT8, peer, tag, cm, h);
    });
    return launch(std::move(c), true);
}

WorkPtr BackendTutti::recv(std::vector<at::Tensor> &tensors, int srcRank, int tag)
{
    return receive("recv", c10d::OpType::RECV, tensors, srcRank, tag);
}

// dist.recv(t) without src, and dist.irecv(t): the Work's sourceRank() (Python's
// work._source_rank(), which dist.recv returns) names the sender once it has completed.
WorkPtr BackendTutti::recvAnysource(std::vector<at::Tensor> &tensors, int tag)
{
    return receive("recvAnysource", c10d::OpType::RECVANYSOURCE, tensors, TUTTI_ANY_SOURCE, tag);
}

} // namespace tutti_torch
