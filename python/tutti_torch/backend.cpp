// backend.cpp: BackendTutti's life cycle (creation through the Store, split, timeout, abort,
// shutdown), how a call runs (launch: blocking, posted, or collected while coalescing), and the
// barriers. The calls themselves are in reductions.cpp, movement.cpp and p2p.cpp.
#include "backend.h"

#include <algorithm>
#include <cstdlib>
#include <stdexcept>
#include <thread>

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "errors.h"
#include "store_oob.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

namespace tutti_torch {

// The configuration of a group's communicator. Asynchronous calls never run in the caller's
// thread unless asked (Options.inline_max, or TUTTI_INLINE_MAX): a post returns at once, so that
// Work.wait's timeout applies and a rank can do other things before its peers join, as with
// Gloo. Blocking calls (asyncOp false) run in the caller's thread whenever nothing is queued.
static tutti_comm_config_t config_of(const BackendTutti::Options &o)
{
    tutti_comm_config_t cfg = TUTTI_COMM_CONFIG_INIT;
    cfg.timeout_s = static_cast<double>(o.timeout.count()) / 1000.0; // checked: positive
    cfg.inline_max = o.inline_max != 0 ? o.inline_max
                     : std::getenv("TUTTI_INLINE_MAX") != nullptr ? 0 /* the variable's */
                                                                  : -1;
    cfg.worker_count = o.worker_count;
    cfg.transport = o.transport.empty() ? nullptr : o.transport.c_str();
    return cfg;
}

// The longest timeout the C API takes (1e9 s), for a group and for a call alike.
static constexpr long long kMaxTimeoutMs = 1000000000000LL;

// check_group_timeout refuses a group's timeout that tutti cannot keep, before anything is
// made: 0 or less (it was taken silently as tutti's default of 30 minutes; Gloo reads 0 as "no
// timeout", which tutti never has) or past the C API's 1e9 s. Every rank passes the same one, so
// all refuse alike, before a collective (split, shrink) that the others would wait in.
static void check_group_timeout(const std::string &op, std::chrono::milliseconds t)
{
    if (t.count() <= 0 || t.count() > kMaxTimeoutMs)
        refuse(op, "the group's timeout is " + std::to_string(t.count()) +
                       " ms: it must be from 1 ms to 1e9 s (tutti gives every wait a deadline; "
                       "for a very long one pass e.g. timedelta(hours=24))");
}

BackendTutti::BackendTutti(const c10::intrusive_ptr<c10d::Store> &store, int rank, int size,
                           c10::intrusive_ptr<Options> options)
    : c10d::Backend(rank, size), store_(store), options_(std::move(options))
{
    if (!store_)
        refuse("init", "the Store is None");
    if (!options_)
        options_ = c10::make_intrusive<Options>();
    check_group_timeout("init", options_->timeout);
    // torch names the groups alike again after destroy_process_group ("0", "1", ...), and a
    // store that outlives them (torchrun's agent store across restarts, a caller's own) still
    // holds the keys of the last group of that name: each group meets under keys of its own
    // (tutti_torch's creator), or it would read the last one's addresses.
    if (!options_->key_prefix.empty())
        store_ = c10::make_intrusive<c10d::PrefixStore>(options_->key_prefix, store_);
    tutti_comm_config_t cfg = config_of(*options_);
    try {
        comm_ = make_comm(store_.get(), "tutti/coll/", rank, size, cfg);
    } catch (...) {
        destroy();
        throw;
    }
    init();
    set_group_note();
    open_store_probe();
}

BackendTutti::BackendTutti(const c10::intrusive_ptr<c10d::Store> &store, int rank, int size,
                           c10::intrusive_ptr<Options> options, tutti_comm_t *comm)
    : c10d::Backend(rank, size), store_(store), options_(std::move(options)), comm_(comm)
{
    init();
    set_group_note();
}

// tutti's texts number ranks within the group: on a group that is not WORLD's every rank, the
// call's name says which global ranks those are.
void BackendTutti::set_group_note()
{
    const auto &g = options_->global_ranks_in_group;
    bool world = g.size() == static_cast<size_t>(size_);
    for (size_t i = 0; world && i < g.size(); i++)
        world = g[i] == static_cast<uint64_t>(i);
    if (g.empty() || world)
        return;
    std::string s = " (on a group of global ranks ";
    for (size_t i = 0; i < g.size() && i < 16; i++)
        s += (i ? ", " : "") + std::to_string(g[i]);
    if (g.size() > 16)
        s += ", ...";
    group_note_ = s + "; the ranks named here are group ranks: group rank i is the i-th of them)";
}

// How long the end of a group waits for the peers to end it too (destroy).
static constexpr double kDestroyWaitS = 2.0;

// connect_to opens a TCP connection to host:port within ms milliseconds; -1 if it cannot.
static int connect_to(const std::string &host, uint16_t port, int ms)
{
    struct addrinfo hints = {}, *ai = nullptr;
    hints.ai_socktype = SOCK_STREAM;
    if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &ai) != 0 || ai == nullptr)
        return -1;
    int fd = ::socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    bool ok = fd >= 0 && (::connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 || errno == EINPROGRESS);
    ::freeaddrinfo(ai);
    if (ok) {
        struct pollfd p = {fd, POLLOUT, 0};
        int err = 0;
        socklen_t len = sizeof err;
        ok = ::poll(&p, 1, ms) == 1 && ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 &&
             err == 0;
    }
    if (!ok && fd >= 0) {
        ::close(fd);
        fd = -1;
    }
    return fd;
}

namespace {

// Entered counts a call in with the Tracker while the caller's thread runs or posts it: a
// shutdown from another thread (destroy_process_group) waits for it rather than destroy the
// communicator under it (it did: the blocked call crashed).
class Entered {
  public:
    Entered(Tracker &t, const std::string &op) : t_(t)
    {
        if (!t_.enter())
            refuse(op, "the process group was shut down (destroy_process_group); create a new "
                       "one");
    }
    ~Entered() { t_.leave(); }
    Entered(const Entered &) = delete;
    Entered &operator=(const Entered &) = delete;

  private:
    Tracker &t_;
};

} // namespace

// Operations still running end first, as in Gloo: a peer may be running one that this rank has
// only queued, which tutti_comm_destroy would fail here and leave that peer waiting for it until
// the timeout. Then the communicator goes (its threads joined: every callback has run), then
// the references the completions parked.
BackendTutti::~BackendTutti()
{
    shutdown();
}

void BackendTutti::shutdown()
{
    if (state_.exchange(2) != 2) {
        std::chrono::milliseconds t = options_->timeout;
        tracker_->close(); // calls running in other threads end first, later ones are refused
        bool idle = tracker_->wait_idle(t.count() > 0 ? t : std::chrono::milliseconds(300000));
        if (!idle && comm_ != nullptr) {
            // still running past the group's timeout: end them, and let them return
            tutti_comm_abort(comm_);
            idle = tracker_->wait_idle(std::chrono::milliseconds(10000));
        }
        if (idle)
            destroy();
        else // a call is still inside the communicator: leave it to that call, freed never
            TORCH_WARN("tutti_torch: a call on this group had not returned 10 s after the group "
                       "was aborted at its shutdown; the group's communicator is left in place");
        await_store_server_gone();
    }
    tracker_->drain();
}

// On a rank other than 0, the default group's store is a client of the TCPStore server in rank
// 0's process (env://, tcp://, or the caller's own TCPStore), which closes only once rank 0's
// destroy_process_group has returned. A rank that left its own destroy first and called
// init_process_group again on the same MASTER_PORT connected to that closing server, and its
// first store request failed ("Broken pipe"); Gloo's slower destroy hid the race. So such a
// rank keeps an idle connection of its own to that server from creation on, and at shutdown
// waits, up to 1 s, until the server closes it. (Asking through torch's client would log a
// warning with a stack trace when the server goes; connecting at shutdown could reach rank
// 0's next server already.) Not under torchrun, whose agent's store outlives the groups, and
// not for other groups: their store is the default group's, which stays.
void BackendTutti::open_store_probe()
{
    const char *agent = std::getenv("TORCHELASTIC_USE_AGENT_STORE");
    if (!options_->default_group || getRank() == 0 ||
        (agent != nullptr && (std::string(agent) == "True" || std::string(agent) == "1")))
        return;
    c10::intrusive_ptr<c10d::Store> base = store_;
    if (auto *prefixed = dynamic_cast<c10d::PrefixStore *>(base.get()))
        base = prefixed->getUnderlyingNonPrefixStore();
    if (auto *tcp = dynamic_cast<c10d::TCPStore *>(base.get()))
        store_probe_ = connect_to(tcp->getHost(), tcp->getPort(), 200);
}

void BackendTutti::await_store_server_gone()
{
    if (store_probe_ < 0)
        return;
    struct pollfd p = {store_probe_, POLLIN | POLLRDHUP, 0};
    auto end = std::chrono::steady_clock::now() + std::chrono::seconds(1);
    int n;
    do { // ends when the server closes (or fails) the connection, or after 1 s: rank 0 keeps
         // its store, or has not destroyed its group yet
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
            end - std::chrono::steady_clock::now());
        n = left.count() > 0 ? ::poll(&p, 1, static_cast<int>(left.count())) : 0;
    } while (n < 0 && errno == EINTR);
    ::close(store_probe_);
    store_probe_ = -1;
}

// abort fails everything queued or running at once (TUTTI_ERR_ABORTED), and every later call
// is refused; the communicator is destroyed by shutdown or the destructor, without waiting
// for the peers (tutti does not wait on a failed communicator).
void BackendTutti::abort()
{
    int expected = 0;
    if (!state_.compare_exchange_strong(expected, 1))
        return;
    if (comm_ != nullptr)
        tutti_comm_abort(comm_);
}

// tutti_comm_destroy waits until the peers have destroyed the communicator too (up to its
// timeout), so that none still needs this rank. torch's groups end in an order of torch's, at
// exit or in a `finally`, while other ranks may still run a collective of another group that
// waits for this rank: a rank that raised, with a second group (FSDP's and DeviceMesh's),
// waited in the destroy of one group while its peer waited for it in the other, each until
// the timeout (30 min by default; Gloo's peers failed at once). So a group's end waits for the
// peers 2 s at most (its own timeout if shorter), as long as data already sent takes to drain;
// after that this rank goes, and a peer still waiting for it is told so (its call fails, "rank
// N destroyed its communicator").
void BackendTutti::destroy()
{
    if (comm_ != nullptr) {
        double limit = static_cast<double>(options_->timeout.count()) / 1e3;
        if (!(limit > 0.0 && limit < kDestroyWaitS))
            limit = kDestroyWaitS;
        tutti_comm_set_timeout(comm_, limit);
        tutti_comm_destroy(comm_);
    }
    comm_ = nullptr;
}

void BackendTutti::check_usable(const std::string &op) const
{
    int s = state_.load(std::memory_order_acquire);
    if (s == 1)
        refuse(op, "the process group was aborted; create a new one");
    if (s == 2)
        refuse(op, "the process group was shut down (destroy_process_group); create a new one");
}

c10::intrusive_ptr<c10d::Backend::Options> BackendTutti::getBackendOptions()
{
    // A copy: ProcessGroup::splitGroup writes the new group's name and timeout into it.
    return c10::make_intrusive<Options>(*options_);
}

void BackendTutti::setTimeout(std::chrono::milliseconds timeout)
{
    if (timeout.count() <= 0)
        refuse("setTimeout", "the timeout must be positive, got " +
                                 std::to_string(timeout.count()) + " ms");
    Entered entered(*tracker_, "setTimeout");
    if (comm_ != nullptr) {
        tutti_status_t st =
            tutti_comm_set_timeout(comm_, static_cast<double>(timeout.count()) / 1e3);
        if (st != TUTTI_OK)
            refuse("setTimeout", status_text(st, comm_));
    }
    options_->timeout = timeout;
}

// list_color hashes a sorted rank list (FNV-1a) to a split color, a non-negative int.
static int list_color(const std::vector<int> &ranks)
{
    uint32_t h = 2166136261u;
    for (int r : ranks)
        for (int b = 0; b < 4; b++) {
            h ^= (static_cast<uint32_t>(r) >> (8 * b)) & 0xffu;
            h *= 16777619u;
        }
    return static_cast<int>(h & 0x7fffffffu);
}

static std::string rank_list(const std::vector<int> &ranks)
{
    std::string t;
    for (size_t i = 0; i < ranks.size() && i < 16; i++)
        t += (i ? ", " : "") + std::to_string(ranks[i]);
    if (ranks.size() > 16)
        t += ", ...";
    return t;
}

// split makes the group of `ranks` (sorted ranks of this group; the caller's own list, or the
// first list for a rank in none) from this group's communicator, with tutti_comm_split: every
// rank of this group takes part, as torch's split_group requires, and the new communicator
// needs no store round of its own. A rank not in ranks gets no group (nullptr).
c10::intrusive_ptr<c10d::Backend>
BackendTutti::split(const c10::intrusive_ptr<c10d::Store> &store, const std::vector<int> &ranks,
                    const c10::intrusive_ptr<c10d::Backend::Options> &opts)
{
    const std::string op = "split";
    check_usable(op);
    Entered entered(*tracker_, op);
    if (ranks.empty())
        refuse(op, "got no ranks");
    if (opts)
        check_group_timeout(op, opts->timeout);
    for (size_t i = 0; i < ranks.size(); i++) {
        if (ranks[i] < 0 || ranks[i] >= size_)
            refuse(op, "rank " + std::to_string(ranks[i]) + " is not in this group of " +
                           std::to_string(size_));
        if (i > 0 && ranks[i] <= ranks[i - 1])
            refuse(op, "the ranks must be sorted and distinct");
    }
    auto it = std::find(ranks.begin(), ranks.end(), rank_);
    bool member = it != ranks.end();
    // The color is a hash of the whole list, as NCCL's split color is: ranks that name different
    // lists (a caller's mistake) land in different communicators, which the size and rank check
    // below then finds, instead of sharing one under a common lowest rank.
    int color = member ? list_color(ranks) : TUTTI_UNDEFINED;
    int key = member ? static_cast<int>(it - ranks.begin()) : 0;
    tutti_comm_t *made = nullptr;
    tutti_status_t st = tutti_comm_split(comm_, color, key, &made);
    if (st != TUTTI_OK) {
        std::string text = status_text(st, comm_);
        if (made != nullptr)
            tutti_comm_destroy(made);
        refuse(op, text);
    }
    if (!member)
        return nullptr;
    if (tutti_comm_size(made) != static_cast<int>(ranks.size()) ||
        tutti_comm_rank(made) != key) {
        int got = tutti_comm_size(made);
        tutti_comm_destroy(made);
        refuse(op, "rank " + std::to_string(rank_) + " named a group of " +
                       std::to_string(ranks.size()) + " ranks (" + rank_list(ranks) + "), but " +
                       (got < static_cast<int>(ranks.size())
                            ? "only " + std::to_string(got) + " of them named the same list"
                            : std::to_string(got) + " ranks joined it (lists that differ, whose "
                                                    "hashes met)") +
                       ": every rank must pass the same ranks for its group");
    }
    auto options = c10::make_intrusive<Options>(*options_);
    options->default_group = false;
    if (opts) {
        options->timeout = opts->timeout;
        options->group_name = opts->group_name;
        options->global_ranks_in_group = opts->global_ranks_in_group;
    }
    if (options->timeout != options_->timeout)
        tutti_comm_set_timeout(made, static_cast<double>(options->timeout.count()) / 1e3);
    return c10::make_intrusive<BackendTutti>(store, key, static_cast<int>(ranks.size()),
                                             std::move(options), made);
}

#ifdef TUTTI_TORCH_SHRINK
// shrink is torch.distributed.shrink_group: the group without ranks_to_exclude (the ranks that
// died, or that the caller leaves out), made with tutti_comm_shrink, which needs neither this
// group's collectives nor its rank 0. This group's operations still running fail now, whatever
// shrink_flags says (SHRINK_ABORT asks for that; tutti always does it). torch numbers the new
// group from the ranks it did not exclude, so a rank that tutti finds dead but the list does
// not name is an error, which names it.
c10::intrusive_ptr<c10d::Backend>
BackendTutti::shrink(const std::vector<int64_t> &ranks_to_exclude, int shrink_flags,
                     const c10::intrusive_ptr<c10d::Backend::Options> &opts_override)
{
    const std::string op = "shrink";
    check_usable(op);
    Entered entered(*tracker_, op);
    if (shrink_flags != 0 && shrink_flags != 1)
        refuse(op, "unknown shrink_flags " + std::to_string(shrink_flags) +
                       " (SHRINK_DEFAULT 0 and SHRINK_ABORT 1 are known)");
    if (opts_override)
        check_group_timeout(op, opts_override->timeout);
    std::vector<int> exclude;
    for (int64_t r : ranks_to_exclude) {
        if (r < 0 || r >= size_)
            refuse(op, "rank " + std::to_string(r) + " is not in this group of " +
                           std::to_string(size_));
        exclude.push_back(static_cast<int>(r));
    }
    // A shrunk communicator keeps its parent's workers, transport and inline size (the C call
    // takes no configuration); an override asking for others cannot be honoured: say so before
    // anything is done, rather than report options the group does not have.
    if (opts_override) {
        auto *mine = dynamic_cast<Options *>(opts_override.get());
        // 0 and "" (a fresh Options' own) mean: the group's
        if (mine != nullptr &&
            ((mine->inline_max != 0 && mine->inline_max != options_->inline_max) ||
             (mine->worker_count != 0 && mine->worker_count != options_->worker_count) ||
             (!mine->transport.empty() && mine->transport != options_->transport)))
            refuse(op, "opts_override asks for another worker_count, transport or inline_max than "
                       "this group's: a shrunk group keeps its parent's (only the timeout may "
                       "differ; leave those fields at 0 or empty)");
    }
    tutti_comm_t *made = nullptr;
    tutti_status_t st = tutti_comm_shrink(comm_, exclude.data(), static_cast<int>(exclude.size()),
                                          &made);
    if (st != TUTTI_OK)
        refuse(op, status_text(st, comm_));
    int want = size_ - static_cast<int>(exclude.size());
    if (tutti_comm_size(made) != want) {
        int got = tutti_comm_size(made);
        tutti_comm_destroy(made);
        refuse(op, "the ranks still alive are " + std::to_string(got) + ", not the " +
                       std::to_string(want) + " that ranks_to_exclude leaves: another rank "
                       "died too; list every dead rank (their errors name them)");
    }
    auto options = c10::make_intrusive<Options>(*options_);
    options->default_group = false;
    if (opts_override)
        options->timeout = opts_override->timeout;
    if (options->timeout != options_->timeout)
        tutti_comm_set_timeout(made, static_cast<double>(options->timeout.count()) / 1e3);
    return c10::make_intrusive<BackendTutti>(store_, tutti_comm_rank(made), want,
                                             std::move(options), made);
}
#endif

namespace {

// CallTimeout gives the posts made while it lives a timeout of their own (tutti_set_call_timeout
// is the calling thread's), and puts the previous setting back.
class CallTimeout {
  public:
    explicit CallTimeout(std::chrono::milliseconds t)
    {
        if (t != c10d::kUnsetTimeout)
            set_ = tutti_set_call_timeout(static_cast<double>(t.count()) / 1e3, &prev_) == TUTTI_OK;
    }
    ~CallTimeout()
    {
        if (set_)
            tutti_set_call_timeout(prev_, nullptr);
    }
    CallTimeout(const CallTimeout &) = delete;
    CallTimeout &operator=(const CallTimeout &) = delete;

  private:
    double prev_ = 0;
    bool set_ = false;
};

} // namespace

WorkPtr BackendTutti::launch(Call &&call, bool async, std::chrono::milliseconds timeout)
{
    check_usable(call.name);
    tracker_->drain(); // a caller's thread: free what completions parked (not inside Entered:
                       // the drain may take the GIL, which a shutdown may hold while it waits)
    Entered entered(*tracker_, call.name);
    // tutti takes 1 ms to 1e9 s; anything else would be refused at the post, after a
    // coalescing block had collected it: say so now.
    const long long ms = timeout.count();
    if (timeout != c10d::kUnsetTimeout && (ms < 1 || ms > kMaxTimeoutMs))
        refuse(call.name, "the call's timeout (opts.timeout) is " + std::to_string(ms) +
                              " ms: give 1 ms to 1e9 s, or leave it unset for the group's");
    call.timeout = timeout;
    if (call.prepare)
        call.prepare();
    seq_.fetch_add(1, std::memory_order_acq_rel);
    // Inside a coalescing block only asynchronous calls are collected: a synchronous one is
    // waited for at once by its caller (torch does, before the block ends), so it runs now,
    // as outside the block; every rank makes the same calls, so the order still agrees.
    if (async && coalescing_.load(std::memory_order_acquire)) {
        std::lock_guard<std::mutex> g(coalesce_mu_);
        if (coalesced_work_) {
            coalesced_.push_back(std::move(call));
            return coalesced_work_;
        }
    }
    auto w = c10::make_intrusive<Work>(rank_, call.type, call.name + group_note_,
                                       std::move(call.outputs), tracker_);
    if (call.nested_outputs)
        w->nested_outputs_ = std::move(call.nested_outputs);
    if (call.finalize)
        w->finalize_.push_back(std::move(call.finalize));
    w->hint_ = call.hint;
    if (!async) {
        // The caller waits on the Work at once: run here, no worker, no handle.
        CallTimeout ct(call.timeout);
        for (const auto &post : call.posts) {
            tutti_status_t st = post(call.comm, nullptr);
            if (st < 0)
                throw std::runtime_error(
                    prefixed(w->name(), with_hint(st, status_text(st, call.comm), call.hint)));
        }
        w->complete_now();
        return w;
    }
    w->keep_ = std::move(call.keep);
    try {
        CallTimeout ct(call.timeout);
        for (const auto &post : call.posts)
            w->post(call.comm, post);
    } catch (...) {
        // Posts made before the refusal run on (the peers take part in them).
        w->fail(std::current_exception());
        w->arm();
        throw;
    }
    w->arm();
    return w;
}

void BackendTutti::startCoalescing()
{
    check_usable("startCoalescing");
    std::lock_guard<std::mutex> g(coalesce_mu_);
    if (coalesced_work_)
        refuse("startCoalescing", "already coalescing: call endCoalescing first");
    coalesced_work_ = c10::make_intrusive<Work>(rank_, c10d::OpType::COALESCED, "coalesced",
                                                std::vector<at::Tensor>(), tracker_);
    coalescing_.store(true, std::memory_order_release);
}

// endCoalescing posts the collected calls in order, each run of in-place allreduces of one
// dtype and op as one tutti_allreduce_coalesced, and returns the Work that completes with all
// of them (the one every call inside the block returned).
WorkPtr BackendTutti::endCoalescing()
{
    std::vector<Call> calls;
    c10::intrusive_ptr<Work> w;
    {
        std::lock_guard<std::mutex> g(coalesce_mu_);
        if (!coalesced_work_)
            refuse("endCoalescing", "called without startCoalescing");
        calls.swap(coalesced_);
        w = std::move(coalesced_work_);
        coalescing_.store(false, std::memory_order_release);
    }
    std::optional<Entered> entered;
    try {
        check_usable("endCoalescing");
        entered.emplace(*tracker_, "endCoalescing");
    } catch (...) {
        // the calls inside the block returned this Work: it fails with the refusal
        w->fail(std::current_exception());
        w->arm();
        throw;
    }
    for (auto &c : calls) {
        w->outputs_.insert(w->outputs_.end(), c.outputs.begin(), c.outputs.end());
        w->keep_.insert(w->keep_.end(), c.keep.begin(), c.keep.end());
        if (c.finalize)
            w->finalize_.push_back(c.finalize);
    }
    try {
        for (size_t i = 0; i < calls.size();) {
            size_t j = i + 1;
            const auto &m = calls[i].merge;
            if (m)
                while (j < calls.size() && calls[j].merge && calls[j].comm == calls[i].comm &&
                       calls[j].merge->dtype == m->dtype && calls[j].merge->op == m->op)
                    j++;
            // A merged run has the shortest timeout any of its calls asked for.
            std::chrono::milliseconds t = c10d::kUnsetTimeout;
            for (size_t k = i; k < j; k++)
                if (calls[k].timeout != c10d::kUnsetTimeout &&
                    (t == c10d::kUnsetTimeout || calls[k].timeout < t))
                    t = calls[k].timeout;
            CallTimeout ct(t);
            if (j - i == 1) {
                for (const auto &post : calls[i].posts)
                    w->post(calls[i].comm, post);
            } else {
                auto bufs = std::make_shared<std::vector<void *>>();
                auto counts = std::make_shared<std::vector<size_t>>();
                for (size_t k = i; k < j; k++) {
                    bufs->push_back(calls[k].merge->buf);
                    counts->push_back(calls[k].merge->count);
                }
                tutti_dtype_t dt = m->dtype;
                tutti_op_t op = m->op;
                w->post(calls[i].comm, [bufs, counts, dt, op](tutti_comm_t *c, tutti_work_t **h) {
                    return tutti_allreduce_coalesced(nullptr, bufs->data(), counts->data(),
                                                     static_cast<int>(bufs->size()), dt, op, c,
                                                     h);
                });
            }
            i = j;
        }
    } catch (...) {
        // What was posted runs on (the peers take part in it); the Work fails with the refusal.
        w->fail(std::current_exception());
        w->arm();
        throw;
    }
    w->arm();
    return w;
}

WorkPtr BackendTutti::barrier(const c10d::BarrierOptions &opts)
{
    Call c;
    c.type = c10d::OpType::BARRIER;
    c.name = "barrier";
    c.comm = comm_;
    c.posts.push_back([](tutti_comm_t *comm, tutti_work_t **h) { return tutti_barrier(comm, h); });
    return launch(std::move(c), opts.asyncOp, opts.timeout);
}

// Store keys: rank r (> 0) sets <base>r when it arrives; rank 0 sets <base>verdict, empty when
// every rank arrived, else the error text.
static bool store_wait(c10d::Store &store, const std::string &key,
                       std::chrono::steady_clock::time_point deadline)
{
    auto pause = std::chrono::microseconds(100);
    std::vector<std::string> keys{key};
    while (!store.check(keys)) {
        auto now = std::chrono::steady_clock::now();
        if (now >= deadline)
            return false;
        std::this_thread::sleep_for(
            std::min<std::chrono::steady_clock::duration>(pause, deadline - now));
        pause = std::min(pause * 2, std::chrono::microseconds(20000));
    }
    return true;
}

// monitoredBarrier: every rank but 0 reports to rank 0 through the Store, which waits up to the
// timeout and names the ranks that did not arrive (the first one, or all with waitAllRanks),
// then tells the others the verdict. Through the Store, not tutti: it must work when a
// communicator is stuck, which is what it is for. The others wait for the verdict as long as
// Gloo's do, the group's timeout (a rank 0 that comes late, from saving a checkpoint say, is
// not a failure), and at least twice the call's timeout, so that rank 0's answer reaches them
// after rank 0's own wait.
void BackendTutti::monitoredBarrier(const c10d::BarrierOptions &opts, bool waitAllRanks)
{
    const std::string op = "monitoredBarrier";
    check_usable(op);
    std::chrono::milliseconds timeout =
        opts.timeout != c10d::kUnsetTimeout ? opts.timeout : options_->timeout;
    std::string base = "tutti/monitored/" + std::to_string(monitored_seq_++) + "/";
    auto start = std::chrono::steady_clock::now();
    if (rank_ != 0) {
        store_->set(base + std::to_string(rank_), std::vector<uint8_t>{1});
        std::chrono::milliseconds wait = std::max(2 * timeout, options_->timeout);
        if (!store_wait(*store_, base + "verdict", start + wait))
            refuse(op, "rank " + std::to_string(rank_) + " got no answer from rank 0 within " +
                           std::to_string(wait.count()) +
                           " ms (the group's timeout, or twice this call's if longer): rank 0 "
                           "did not reach monitoredBarrier");
        std::vector<uint8_t> v = store_->get(base + "verdict");
        if (!v.empty())
            refuse(op, std::string(v.begin(), v.end()) + " (rank 0's verdict)");
        return;
    }
    std::vector<int> missing;
    std::string verdict;
    for (int r = 1; r < size_; r++) {
        // The time spent before rank r's turn (or a timeout of 0): rank 0 is the one that ran
        // out, as Gloo words it; the ranks waited for so far passed.
        if (!waitAllRanks && std::chrono::steady_clock::now() >= start + timeout) {
            verdict = "Rank 0 timed out in monitoredBarrier after " +
                      std::to_string(timeout.count()) + " ms" +
                      (r > 1 ? "; the ranks below " + std::to_string(r) + " passed" : "");
            break;
        }
        if (!store_wait(*store_, base + std::to_string(r), start + timeout)) {
            missing.push_back(r);
            if (!waitAllRanks)
                break; // the first rank that failed, as Gloo reports it
        }
    }
    if (verdict.empty() && !missing.empty()) {
        std::string list;
        for (int r : missing)
            list += (list.empty() ? "" : ", ") + std::to_string(r);
        verdict = std::string(missing.size() > 1 ? "Ranks " : "Rank ") + list +
                  " failed to pass monitoredBarrier in " + std::to_string(timeout.count()) +
                  " ms";
    }
    store_->set(base + "verdict", std::vector<uint8_t>(verdict.begin(), verdict.end()));
    for (int r = 1; r < size_; r++)
        if (std::find(missing.begin(), missing.end(), r) == missing.end())
            store_->deleteKey(base + std::to_string(r));
    if (!verdict.empty())
        refuse(op, verdict);
}

} // namespace tutti_torch
