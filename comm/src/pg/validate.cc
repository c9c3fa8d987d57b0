#include "validate.h"

#include <cstring>

#include <limits>
#include <numeric>

#include "commkit/common/strings.h"

namespace commkit {

namespace {

constexpr std::size_t kMaxBytes = std::numeric_limits<std::size_t>::max() / 4;

Status Bad(const CollectiveArgs& a, std::string_view what) {
  return Status::InvalidArgument(StrCat(ToString(a.kind), ": ", what));
}

// count * factor * sizeof(dtype) must not overflow (nor exceed kMaxBytes). Checked multiplications,
// not divisions: this runs on every call, and a 64-bit division costs tens of cycles.
bool Fits(std::size_t count, std::size_t factor, DataType dtype) {
  std::size_t elems = 0, bytes = 0;
  return !__builtin_mul_overflow(count, factor, &elems) && !__builtin_mul_overflow(elems, SizeOf(dtype), &bytes) &&
         bytes <= kMaxBytes;
}

std::size_t Sum(const std::vector<std::size_t>& v) { return std::accumulate(v.begin(), v.end(), std::size_t{0}); }

}  // namespace

Status ValidateArgs(const CollectiveArgs& a, int rank, int size) {
  const auto p = static_cast<std::size_t>(size);
  const bool rooted = a.kind == CollectiveKind::kBroadcast || a.kind == CollectiveKind::kReduce ||
                      a.kind == CollectiveKind::kGather || a.kind == CollectiveKind::kScatter;
  if (rooted && (a.root < 0 || a.root >= size))
    return Bad(a, StrCat("root ", a.root, " is out of range for a group of ", size, " ranks"));
  if ((a.kind == CollectiveKind::kSend || a.kind == CollectiveKind::kRecv) && (a.peer < 0 || a.peer >= size))
    return Bad(a, StrCat("peer ", a.peer, " is out of range for a group of ", size, " ranks"));
  if ((a.kind == CollectiveKind::kSend || a.kind == CollectiveKind::kRecv) && a.peer == rank)
    return Bad(a, StrCat("peer ", a.peer, " is this rank"));
  if (a.tag < 0) return Bad(a, StrCat("tag ", a.tag, " is negative"));
  if (IsReduction(a.kind) && !IsFloatingPoint(a.dtype) && a.op.kind == ReduceKind::kPreMulSum && a.op.scalar != 1.0 &&
      a.op.scalar != static_cast<double>(static_cast<std::int64_t>(a.op.scalar)))
    return Bad(a, StrCat("premul_sum scalar ", a.op.scalar, " is not an integer for ", ToString(a.dtype)));
  if (IsReduction(a.kind) && IsFloatingPoint(a.dtype) &&
      (a.op.kind == ReduceKind::kBand || a.op.kind == ReduceKind::kBor || a.op.kind == ReduceKind::kBxor))
    return Bad(a, StrCat(ToString(a.op.kind), " is a bitwise reduction; ", ToString(a.dtype), " is a floating type"));

  std::size_t send_elems = 0, recv_elems = 0;
  bool v = a.kind == CollectiveKind::kAllgatherv || a.kind == CollectiveKind::kReduceScatterV ||
           a.kind == CollectiveKind::kAlltoallv;
  if (v && a.counts.size() != p)
    return Bad(a, StrCat("counts has ", a.counts.size(), " entries; the group has ", size, " ranks"));
  if (a.kind == CollectiveKind::kAlltoallv && a.recv_counts.size() != p)
    return Bad(a, StrCat("recv_counts has ", a.recv_counts.size(), " entries; the group has ", size, " ranks"));
  if (v) {
    for (std::size_t c : a.counts)
      if (!Fits(c, p, a.dtype)) return Bad(a, "counts overflow");
    for (std::size_t c : a.recv_counts)
      if (!Fits(c, p, a.dtype)) return Bad(a, "recv_counts overflow");
  } else if (!Fits(a.count, p, a.dtype)) {
    return Bad(a, StrCat("count ", a.count, " x ", size, " ranks x ", SizeOf(a.dtype), " bytes overflows"));
  }
  switch (a.kind) {
    case CollectiveKind::kAllreduce: send_elems = recv_elems = a.count; break;
    case CollectiveKind::kBroadcast: recv_elems = a.count; break;
    case CollectiveKind::kReduce: send_elems = a.count; recv_elems = rank == a.root ? a.count : 0; break;
    case CollectiveKind::kAllgather: send_elems = a.count; recv_elems = a.count * p; break;
    case CollectiveKind::kAllgatherv: send_elems = a.counts[rank]; recv_elems = Sum(a.counts); break;
    case CollectiveKind::kReduceScatter: send_elems = a.count * p; recv_elems = a.count; break;
    case CollectiveKind::kReduceScatterV: send_elems = Sum(a.counts); recv_elems = a.counts[rank]; break;
    case CollectiveKind::kAlltoall: send_elems = recv_elems = a.count * p; break;
    case CollectiveKind::kAlltoallv: send_elems = Sum(a.counts); recv_elems = Sum(a.recv_counts); break;
    case CollectiveKind::kGather: send_elems = a.count; recv_elems = rank == a.root ? a.count * p : 0; break;
    case CollectiveKind::kScatter: send_elems = rank == a.root ? a.count * p : 0; recv_elems = a.count; break;
    case CollectiveKind::kBarrier: break;
    case CollectiveKind::kSend: send_elems = a.count; break;
    case CollectiveKind::kRecv: recv_elems = a.count; break;
  }
  // In-place forms pass send == nullptr or send aliasing recv; only a missing buffer with data is wrong.
  bool in_place = a.send == nullptr || a.send == a.recv;
  bool needs_send_buffer = send_elems > 0 && !(in_place && a.kind != CollectiveKind::kSend &&
                                               a.kind != CollectiveKind::kScatter && a.kind != CollectiveKind::kGather);
  if (needs_send_buffer && a.send == nullptr) return Bad(a, StrCat("send buffer is null with ", send_elems, " elements"));
  // reduce_scatter has no in-place form (its result is smaller than its input; backend.h): a null send
  // buffer is an error, not "in place" (the gloo and host backends would read through it).
  if ((a.kind == CollectiveKind::kReduceScatter || a.kind == CollectiveKind::kReduceScatterV) && send_elems > 0 &&
      a.send == nullptr)
    return Bad(a, StrCat("send buffer is null with ", send_elems, " elements (reduce_scatter has no in-place form)"));
  // In-place alltoallv sends from the receive buffer: it must hold what this rank sends.
  if (a.kind == CollectiveKind::kAlltoallv && in_place && send_elems > recv_elems)
    return Bad(a, StrCat("in place, this rank sends ", send_elems, " elements but the buffer holds ", recv_elems));
  if (a.kind == CollectiveKind::kScatter && rank == a.root && send_elems > 0 && a.send == nullptr)
    return Bad(a, "the root's send buffer is null");
  if (a.kind == CollectiveKind::kGather && send_elems > 0 && a.send == nullptr)
    return Bad(a, "send buffer is null");
  if (recv_elems > 0 && a.recv == nullptr) return Bad(a, StrCat("receive buffer is null with ", recv_elems, " elements"));
  return Status::Ok();
}

std::string Describe(const CollectiveArgs& a) {
  std::string out = StrCat(ToString(a.kind), " ", ToString(a.dtype));
  if (IsReduction(a.kind)) out += StrCat(" ", a.op.ToString());
  switch (a.kind) {
    case CollectiveKind::kAlltoallv: break;  // per-rank counts legitimately differ
    case CollectiveKind::kAllgatherv:
    case CollectiveKind::kReduceScatterV: {
      std::vector<std::string> c;
      for (auto n : a.counts) c.push_back(std::to_string(n));
      out += StrCat(" counts=[", Join(c, ","), "]");
      break;
    }
    case CollectiveKind::kBarrier: return "barrier";
    default: out += StrCat(" count=", a.count);
  }
  if (a.kind == CollectiveKind::kBroadcast || a.kind == CollectiveKind::kReduce || a.kind == CollectiveKind::kGather ||
      a.kind == CollectiveKind::kScatter)
    out += StrCat(" root=", a.root);
  return out;
}

std::uint64_t ShapeHash(const CollectiveArgs& a) {
  // A word-at-a-time multiply/xor-shift mix over what must agree across ranks (the fields Describe()
  // prints), without building text. Each step is a bijection of the state for a given input word,
  // so two calls that differ in one field never collide. alltoallv's counts legitimately differ per
  // rank; a barrier has no fields.
  std::uint64_t h = 0x9e3779b97f4a7c15ull;
  auto mix = [&h](std::uint64_t v) {
    h = (h ^ v) * 0xff51afd7ed558ccdull;
    h ^= h >> 32;
  };
  std::uint64_t shape = static_cast<std::uint64_t>(a.kind);
  if (a.kind != CollectiveKind::kBarrier) {
    shape |= static_cast<std::uint64_t>(a.dtype) << 8;
    if (IsReduction(a.kind)) {
      shape |= static_cast<std::uint64_t>(a.op.kind) << 16;
      std::uint64_t bits;
      std::memcpy(&bits, &a.op.scalar, sizeof bits);
      mix(bits);
    }
    if (a.kind == CollectiveKind::kBroadcast || a.kind == CollectiveKind::kReduce || a.kind == CollectiveKind::kGather ||
        a.kind == CollectiveKind::kScatter)
      shape |= static_cast<std::uint64_t>(static_cast<std::uint32_t>(a.root)) << 24;
  }
  mix(shape);
  if (a.kind == CollectiveKind::kAllgatherv || a.kind == CollectiveKind::kReduceScatterV) {
    mix(a.counts.size());
    for (std::size_t c : a.counts) mix(c);
  } else if (a.kind != CollectiveKind::kAlltoallv && a.kind != CollectiveKind::kBarrier) {
    mix(a.count);
  }
  return h;
}

void ShapeCache::Store(const CollectiveArgs& a, std::uint64_t shape_hash) {
  // Validation of the v-collectives reads their count vectors, which the key does not hold.
  if (!a.counts.empty() || !a.recv_counts.empty() || a.kind == CollectiveKind::kAllgatherv ||
      a.kind == CollectiveKind::kReduceScatterV || a.kind == CollectiveKind::kAlltoallv) {
    valid_ = false;
    return;
  }
  key_ = Key::Of(a);
  hash_ = shape_hash;
  valid_ = true;
}

}  // namespace commkit
