// tests/nccl/double_internal.hpp: internals of libnccl_double.so, the CPU test double of NCCL: sockets,
// reductions, communicators, the operations queued on them and their device buffers' host copies.
#pragma once

#include <nccl.h>

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace shunt::test_double {

// ---- Errors and settings (double_api.cpp) ----

/// Records the message as ncclGetLastError's text, prints it when NCCL_DEBUG is WARN, INFO or TRACE, returns code.
ncclResult_t fail(ncclResult_t code, const char* format, ...) __attribute__((format(printf, 2, 3)));
/// Prints on stderr when NCCL_DEBUG is INFO or TRACE (addresses, communicators made).
void info(const char* format, ...) __attribute__((format(printf, 1, 2)));
/// Prints on stderr whatever NCCL_DEBUG says (timeouts, lost peers): a broken test must say why it stopped.
void warn_always(const char* format, ...) __attribute__((format(printf, 1, 2)));
/// Seconds a blocking wait may go without progress before it fails: NCCL_DOUBLE_TIMEOUT, default 120.
double timeout_seconds();

// ---- Sockets (double_net.cpp) ----

/// An IPv4 address and port, both in network byte order.
struct endpoint {
    uint32_t addr = 0;
    uint16_t port = 0;
};

/// The bounds of a blocking wait: its timeout without progress, an abort flag polled every 100 ms, and the call
/// named in the error message.
struct wait_limits {
    double timeout_s;
    const std::atomic<bool>* abort;
    const char* call;
};

/// Loopback (127.0.0.0/8) or the emulated cluster's 198.18.0.0/15: the only addresses the double connects to.
bool address_allowed(uint32_t addr_be);
/// The address this process listens on: NCCL_SOCKET_IFNAME's interface when set, else 127.0.0.1.
ncclResult_t advertised_address(uint32_t* addr_be);
ncclResult_t open_listener(uint32_t addr_be, int backlog, int* fd, endpoint* ep);
/// "a.b.c.d:port", for messages.
std::string to_string(const endpoint& ep);
ncclResult_t connect_to(const endpoint& ep, const wait_limits& w, int* fd);
ncclResult_t accept_one(int listen_fd, const wait_limits& w, int* fd);
ncclResult_t send_exact(int fd, const void* data, size_t bytes, const wait_limits& w);
ncclResult_t recv_exact(int fd, void* data, size_t bytes, const wait_limits& w);
void close_fd(int& fd);
/// Fills id with the address of a new rendezvous listener (a detached thread) and a random nonce.
ncclResult_t make_unique_id(ncclUniqueId* id);
/// Meets the other ranks at the id's rendezvous: returns the id's nonce and every rank's listening endpoint.
ncclResult_t rendezvous(const ncclUniqueId& id, int nranks, int rank, const endpoint& mine, const wait_limits& w,
                        uint64_t* nonce, std::vector<endpoint>* table);
/// Connects to every lower rank and accepts every higher one: fds[peer], -1 for rank itself.
ncclResult_t connect_mesh(int rank, int nranks, uint64_t nonce, int listen_fd, const std::vector<endpoint>& table,
                          const wait_limits& w, std::vector<int>* fds);

// ---- Reductions (double_reduce.cpp) ----

/// Bytes of one element, 0 for a value outside ncclDataType_t.
size_t type_size(ncclDataType_t t);
bool is_fp8(ncclDataType_t t);

/// NCCL's device-side reductions: avg is premul_sum by 1/n for floating types and sum_post_div for integers.
enum class red_kind { sum, prod, max, min, premul_sum, sum_post_div };
struct red_spec {
    red_kind kind = red_kind::sum;
    unsigned char scalar[8] = {};  // premul_sum with a host scalar, in the element type
    const void* scalar_ptr = nullptr;  // premul_sum with a scalar read when the operation runs
    uint64_t divisor = 1;  // sum_post_div
};

/// dst[i] = srcs[0][i] (+) srcs[1][i] (+) ... in this order, each step in the type's arithmetic (16-bit floats
/// widened to float, combined, rounded to nearest even). dst may be one of the sources, at the same offset.
void reduce(ncclDataType_t t, const red_spec& spec, void* dst, const void* const* srcs, int n, size_t count);
uint16_t float_to_half(float f);
float half_to_float(uint16_t h);
uint16_t float_to_bf16(float f);
float bf16_to_float(uint16_t b);

// ---- Communicators and operations (double_engine.cpp, double_api.cpp) ----

enum class func : uint16_t {
    allreduce = 1,
    reduce,
    broadcast,
    reduce_scatter,
    allgather,
    alltoall,
    gather,
    scatter,
    send,
    recv,
    split_exchange,
    shrink_exchange  // an allgather among the ranks that ncclCommShrink keeps (op::peers)
};
const char* func_name(func f);

/// Collective, point-to-point and shrink messages are matched separately, each in order per pair of ranks. The
/// shrink's own kind keeps it apart from the parent's collectives, in which the excluded ranks take no part and
/// which NCCL_SHRINK_ABORT may have cut short.
enum msg_kind : uint16_t { kind_coll = 0, kind_p2p = 1, kind_shrink = 2, msg_kinds = 3 };

/// What precedes every message on a connection: the receiver checks kind, function, sequence number and size.
struct header {
    uint32_t magic;
    uint16_t kind;
    uint16_t fn;
    uint64_t seq;
    uint64_t bytes;
};

struct comm;

/// One queued NCCL call. Collectives of one communicator run one after the other, point-to-point calls all at once.
struct op {
    func fn{};
    comm* c = nullptr;
    const void* sendbuff = nullptr;
    void* recvbuff = nullptr;
    size_t count = 0;
    ncclDataType_t type = ncclInt8;
    red_spec red;
    int root = 0;  // the root, or the peer of a send or receive
    cudaStream_t stream = nullptr;  // the call's: device buffers are staged after the work queued on it
    // shrink_exchange: the parent's ranks taking part; its seq is set by the caller (the parent's collectives keep
    // theirs).
    std::vector<int> peers;
    // Execution state.
    uint64_t seq = 0;
    size_t pending_tx = 0, pending_rx = 0;
    bool finished = false;
    std::vector<char> staging;  // peers' contributions of reductions and alltoall
};

struct rx_post {
    op* owner;
    char* dst;
    size_t bytes;
    func fn;
    uint64_t seq;
};
struct tx_item {
    header hdr;
    const char* data;
    size_t written;  // of header and data together
    op* owner;
};
struct unexpected_msg {
    header hdr;
    std::vector<char> body;
};

/// The connection to one peer and what is queued on it.
struct channel {
    int fd = -1;
    bool closed = false;  // the peer closed it: fine unless something more is expected
    std::deque<tx_item> txq;
    std::deque<rx_post> posted[msg_kinds];
    std::deque<unexpected_msg> unexpected[msg_kinds];
    // The message being read.
    header hdr{};
    size_t hdr_got = 0;
    bool in_body = false;
    rx_post body_post{};  // owner == nullptr: into body_buf, queued as unexpected when complete
    std::vector<char> body_buf;
    size_t body_got = 0;
    uint64_t p2p_sent = 0, p2p_received = 0;
};

/// A PreMulSum operator made by ncclRedOpCreatePreMulSum.
struct user_op {
    bool used = false;
    ncclDataType_t type = ncclFloat32;
    bool by_pointer = false;
    unsigned char scalar[8] = {};
    const void* ptr = nullptr;
};

/// A background job (non-blocking communicators). `done` is set once it no longer touches any communicator;
/// the thread is joined by whoever drops the last reference (never the thread itself).
struct group_job {
    std::thread thread;
    std::mutex m;
    std::condition_variable cv;
    bool done = false;
    ~group_job() {
        if (thread.joinable()) thread.join();
    }
};

constexpr uint64_t comm_magic = 0x636f6d6d64626c31ULL;

/// What an ncclComm_t points to in the double.
struct comm {
    uint64_t magic = comm_magic;
    int rank = 0, nranks = 0, cuda_dev = 0;
    uint64_t nonce = 0;
    bool blocking = true;
    double timeout_s = 120;
    std::vector<channel> ch;
    std::deque<op*> self_sends, self_recvs;
    uint64_t coll_seq = 0;
    int split_count = 0;
    std::vector<user_op> user_ops;
    bool finalize_called = false;
    std::mutex mu;  // held while operations run on the communicator
    std::atomic<int> state{ncclSuccess};
    std::atomic<bool> aborting{false};
    std::mutex job_mu;
    std::shared_ptr<group_job> job;
    uint64_t magic_end = comm_magic;
};

/// The int a C caller passed for an enum argument, read without loading it as the C++ enum (a value outside the
/// enum's range, such as -1, is fine in C but undefined behaviour once loaded as a C++ enum).
template <typename E>
int raw(const E& e) {
    static_assert(sizeof(E) == sizeof(int));
    int v;
    std::memcpy(&v, &e, sizeof v);
    return v;
}

inline comm* as_comm(ncclComm_t c) { return reinterpret_cast<comm*>(c); }
inline ncclComm_t as_handle(comm* c) { return reinterpret_cast<ncclComm_t>(c); }

/// Runs the operations (several communicators allowed, each one's in program order) to completion, device buffers
/// staged (stage_in, stage_out). Locks each communicator; on failure every one of them is left in the error state.
ncclResult_t run_ops(const std::vector<op*>& ops, const char* call);

// ---- Device buffers (double_device.cpp) ----

/// The host copies that a run's operations use in place of their device and managed buffers.
struct device_stage {
    struct buffer {
        std::vector<char> host;
        void* device = nullptr;  // where the result goes back (nullptr: an input only)
        size_t bytes = 0, offset = 0;  // of the result, and its place in `host`
        cudaStream_t stream = nullptr;
        int dev = -1;
    };
    std::vector<buffer> buffers;
    std::vector<std::pair<cudaStream_t, int>> streams;  // with their device, synchronised before and after
};

/// Before a run (its communicators locked), where built with CUDA and a device is found: every operation with a
/// device or managed buffer (cudaPointerGetAttributes) waits for its stream, gets host copies of its inputs and
/// room for its outputs, and is pointed at them (in-place buffers share one copy); pinned host buffers only wait
/// for their stream. Host memory, a build without CUDA and a process without a device stage nothing.
ncclResult_t stage_in(const std::vector<op*>& ops, const char* call, device_stage* s);
/// After a successful run: the outputs copied back to the device buffers, every stream synchronised.
ncclResult_t stage_out(device_stage& s, const char* call);

}  // namespace shunt::test_double
