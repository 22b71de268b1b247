// p2p.cpp: BackendTutti's point-to-point calls: send, recv, and recvAnysource (refused until
// tutti's point-to-point engine can receive from any source). Messages travel as bytes, so
// every dtype goes. tutti matches the n-th send to a peer with that peer's n-th recv from this
// rank; the tag must agree and lie in 0..1023 (tutti refuses others, in its own words).
#include "backend.h"

#include "errors.h"
#include "tensors.h"

namespace tutti_torch {

WorkPtr BackendTutti::send(std::vector<at::Tensor> &tensors, int dstRank, int tag)
{
    const std::string op = "send";
    check_usable(op);
    const at::Tensor &t = check_one(op, tensors);
    tutti_comm_t *comm = p2p_comm(op, rank_, dstRank);
    at::Tensor src = t.contiguous();
    Call c;
    c.type = c10d::OpType::SEND;
    c.name = op;
    c.outputs = {t};
    c.comm = comm;
    c.keep = {src};
    const void *p = src.data_ptr();
    size_t n = nbytes(t);
    c.posts.push_back([p, n, dstRank, tag](tutti_comm_t *cm, tutti_work_t **h) {
        return tutti_send(p, n, TUTTI_UINT8, dstRank, tag, cm, h);
    });
    return launch(std::move(c), true); // c10d's send has no asyncOp: torch waits when it must
}

WorkPtr BackendTutti::recv(std::vector<at::Tensor> &tensors, int srcRank, int tag)
{
    const std::string op = "recv";
    check_usable(op);
    const at::Tensor &t = check_one(op, tensors);
    tutti_comm_t *comm = p2p_comm(op, srcRank, rank_);
    Buf b(t, false);
    Call c;
    c.type = c10d::OpType::RECV;
    c.name = op;
    c.outputs = {t};
    c.comm = comm;
    c.keep = {b.work};
    if (b.copied())
        c.finalize = [b] { b.copy_back(); };
    void *p = b.ptr();
    size_t n = nbytes(t);
    c.posts.push_back([p, n, srcRank, tag](tutti_comm_t *cm, tutti_work_t **h) {
        return tutti_recv(p, n, TUTTI_UINT8, srcRank, tag, cm, h);
    });
    return launch(std::move(c), true);
}

// recvAnysource needs a receive that any sender can match (tutti_recv from TUTTI_ANY_SOURCE)
// and the sender's rank afterwards (tutti_work_source, for Work.sourceRank), which tutti's
// point-to-point engine adds; until then it is refused, and only here.
WorkPtr BackendTutti::recvAnysource(std::vector<at::Tensor> &tensors, int tag)
{
    (void)tensors;
    (void)tag;
    refuse("recvAnysource", "receiving from any source is not supported yet: tutti matches each "
                            "message to the rank that sent it; name the source (dist.recv(tensor, "
                            "src=rank))");
}

} // namespace tutti_torch
