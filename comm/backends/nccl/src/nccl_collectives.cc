#include "nccl_collectives.h"

#include <nccl.h>

#include <cmath>
#include <cstring>

#include "commkit/common/strings.h"

namespace commkit::comm::nccl {
namespace {

ncclDataType_t T(int dtype) { return static_cast<ncclDataType_t>(dtype); }
ncclRedOp_t Op(int op) { return static_cast<ncclRedOp_t>(op); }
const char* At(const void* base, std::size_t elements, std::size_t elem) {
  return static_cast<const char*>(base) + elements * elem;
}
char* At(void* base, std::size_t elements, std::size_t elem) {
  return static_cast<char*>(base) + elements * elem;
}

Status CheckVector(const std::vector<std::size_t>& v, int nranks, const char* what) {
  if (v.size() != static_cast<std::size_t>(nranks)) {
    return Status::InvalidArgument(StrCat(what, " has ", v.size(), " entries; the group has ", nranks,
                                          " ranks (one entry per rank)"));
  }
  return Status::Ok();
}

}  // namespace

std::size_t NcclTypeSize(int dtype) {
  switch (T(dtype)) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
    default: return 0;
  }
}

NcclCall AllReduceCall(const void* send, void* recv, std::size_t count, int dtype, int op) {
  return [=](ncclComm_t c, cudaStream_t s) { return static_cast<int>(ncclAllReduce(send, recv, count, T(dtype), Op(op), c, s)); };
}
NcclCall BroadcastCall(const void* send, void* recv, std::size_t count, int dtype, int root) {
  return [=](ncclComm_t c, cudaStream_t s) { return static_cast<int>(ncclBroadcast(send, recv, count, T(dtype), root, c, s)); };
}
NcclCall ReduceCall(const void* send, void* recv, std::size_t count, int dtype, int op, int root) {
  return [=](ncclComm_t c, cudaStream_t s) { return static_cast<int>(ncclReduce(send, recv, count, T(dtype), Op(op), root, c, s)); };
}
NcclCall AllGatherCall(const void* send, void* recv, std::size_t send_count, int dtype) {
  return [=](ncclComm_t c, cudaStream_t s) { return static_cast<int>(ncclAllGather(send, recv, send_count, T(dtype), c, s)); };
}
NcclCall ReduceScatterCall(const void* send, void* recv, std::size_t recv_count, int dtype, int op) {
  return [=](ncclComm_t c, cudaStream_t s) { return static_cast<int>(ncclReduceScatter(send, recv, recv_count, T(dtype), Op(op), c, s)); };
}
NcclCall SendCall(const void* buf, std::size_t count, int dtype, int peer) {
  return [=](ncclComm_t c, cudaStream_t s) { return static_cast<int>(ncclSend(buf, count, T(dtype), peer, c, s)); };
}
NcclCall RecvCall(void* buf, std::size_t count, int dtype, int peer) {
  return [=](ncclComm_t c, cudaStream_t s) { return static_cast<int>(ncclRecv(buf, count, T(dtype), peer, c, s)); };
}

std::vector<NcclCall> AllToAllCalls(const void* send, void* recv, std::size_t count, int dtype, int nranks) {
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 28, 0)
  (void)nranks;
  return {[=](ncclComm_t c, cudaStream_t s) { return static_cast<int>(ncclAlltoAll(send, recv, count, T(dtype), c, s)); }};
#else
  std::size_t elem = NcclTypeSize(dtype);
  std::vector<NcclCall> calls;
  for (int peer = 0; peer < nranks; ++peer) {
    calls.push_back(SendCall(At(send, count * peer, elem), count, dtype, peer));
    calls.push_back(RecvCall(At(recv, count * peer, elem), count, dtype, peer));
  }
  return calls;
#endif
}

std::vector<NcclCall> GatherCalls(const void* send, void* recv, std::size_t count, int dtype, int root,
                                  int rank, int nranks) {
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 28, 0)
  (void)rank;
  (void)nranks;
  return {[=](ncclComm_t c, cudaStream_t s) { return static_cast<int>(ncclGather(send, recv, count, T(dtype), root, c, s)); }};
#else
  std::size_t elem = NcclTypeSize(dtype);
  std::vector<NcclCall> calls;
  calls.push_back(SendCall(send, count, dtype, root));
  if (rank == root) {
    for (int peer = 0; peer < nranks; ++peer) calls.push_back(RecvCall(At(recv, count * peer, elem), count, dtype, peer));
  }
  return calls;
#endif
}

std::vector<NcclCall> ScatterCalls(const void* send, void* recv, std::size_t count, int dtype, int root,
                                   int rank, int nranks) {
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 28, 0)
  (void)rank;
  (void)nranks;
  return {[=](ncclComm_t c, cudaStream_t s) { return static_cast<int>(ncclScatter(send, recv, count, T(dtype), root, c, s)); }};
#else
  std::size_t elem = NcclTypeSize(dtype);
  std::vector<NcclCall> calls;
  if (rank == root) {
    for (int peer = 0; peer < nranks; ++peer) calls.push_back(SendCall(At(send, count * peer, elem), count, dtype, peer));
  }
  calls.push_back(RecvCall(recv, count, dtype, root));
  return calls;
#endif
}

Result<std::vector<NcclCall>> AllGatherVCalls(const void* send, std::size_t send_count, void* recv,
                                              const std::vector<std::size_t>& recv_counts,
                                              const std::vector<std::size_t>& recv_displs, int dtype,
                                              int rank, int nranks) {
  COMMKIT_RETURN_IF_ERROR(CheckVector(recv_counts, nranks, "allgatherv recv_counts"));
  COMMKIT_RETURN_IF_ERROR(CheckVector(recv_displs, nranks, "allgatherv recv_displs"));
  if (recv_counts[rank] != send_count) {
    return Status::InvalidArgument(StrCat("allgatherv: recv_counts[", rank, "] = ", recv_counts[rank],
                                          " but this rank sends ", send_count, " elements"));
  }
  std::size_t elem = NcclTypeSize(dtype);
  std::vector<NcclCall> calls;
  for (int peer = 0; peer < nranks; ++peer) {
    calls.push_back(SendCall(send, send_count, dtype, peer));
    calls.push_back(RecvCall(At(recv, recv_displs[peer], elem), recv_counts[peer], dtype, peer));
  }
  return calls;
}

Result<std::vector<NcclCall>> AllToAllVCalls(const void* send, const std::vector<std::size_t>& send_counts,
                                             const std::vector<std::size_t>& send_displs, void* recv,
                                             const std::vector<std::size_t>& recv_counts,
                                             const std::vector<std::size_t>& recv_displs, int dtype,
                                             int nranks) {
  COMMKIT_RETURN_IF_ERROR(CheckVector(send_counts, nranks, "alltoallv send_counts"));
  COMMKIT_RETURN_IF_ERROR(CheckVector(send_displs, nranks, "alltoallv send_displs"));
  COMMKIT_RETURN_IF_ERROR(CheckVector(recv_counts, nranks, "alltoallv recv_counts"));
  COMMKIT_RETURN_IF_ERROR(CheckVector(recv_displs, nranks, "alltoallv recv_displs"));
  std::size_t elem = NcclTypeSize(dtype);
  std::vector<NcclCall> calls;
  for (int peer = 0; peer < nranks; ++peer) {
    if (send_counts[peer] > 0) calls.push_back(SendCall(At(send, send_displs[peer], elem), send_counts[peer], dtype, peer));
    if (recv_counts[peer] > 0) calls.push_back(RecvCall(At(recv, recv_displs[peer], elem), recv_counts[peer], dtype, peer));
  }
  return calls;
}

std::uint16_t FloatToHalfBits(float value) {
  std::uint32_t x;
  std::memcpy(&x, &value, 4);
  std::uint32_t sign = (x >> 16) & 0x8000u;
  std::uint32_t exp = (x >> 23) & 0xffu;
  std::uint32_t mant = x & 0x7fffffu;
  if (exp == 0xffu) return static_cast<std::uint16_t>(sign | 0x7c00u | (mant ? 0x200u : 0u));  // inf/nan
  int e = static_cast<int>(exp) - 127 + 15;
  if (e >= 31) return static_cast<std::uint16_t>(sign | 0x7c00u);  // overflow -> inf
  if (e <= 0) {                                                   // subnormal or zero
    if (e < -10) return static_cast<std::uint16_t>(sign);
    mant |= 0x800000u;
    int shift = 14 - e;
    std::uint32_t half = mant >> shift;
    std::uint32_t rem = mant & ((1u << shift) - 1);
    std::uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1u))) ++half;
    return static_cast<std::uint16_t>(sign | half);
  }
  std::uint32_t half = sign | (static_cast<std::uint32_t>(e) << 10) | (mant >> 13);
  std::uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (half & 1u))) ++half;  // may carry into exponent: correct
  return static_cast<std::uint16_t>(half);
}

std::uint16_t FloatToBfloat16Bits(float value) {
  std::uint32_t x;
  std::memcpy(&x, &value, 4);
  if ((x & 0x7f800000u) == 0x7f800000u && (x & 0x7fffffu)) return static_cast<std::uint16_t>((x >> 16) | 0x40u);
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<std::uint16_t>(x >> 16);
}

Result<PreMulSumOp> CreatePreMulSum(ncclComm_t comm, double scalar, int dtype, std::string_view where) {
  union {
    std::int8_t i8;
    std::uint8_t u8;
    std::int32_t i32;
    std::uint32_t u32;
    std::int64_t i64;
    std::uint64_t u64;
    std::uint16_t h;
    float f;
    double d;
  } value{};
  switch (T(dtype)) {
    case ncclInt8: value.i8 = static_cast<std::int8_t>(scalar); break;
    case ncclUint8: value.u8 = static_cast<std::uint8_t>(scalar); break;
    case ncclInt32: value.i32 = static_cast<std::int32_t>(scalar); break;
    case ncclUint32: value.u32 = static_cast<std::uint32_t>(scalar); break;
    case ncclInt64: value.i64 = static_cast<std::int64_t>(scalar); break;
    case ncclUint64: value.u64 = static_cast<std::uint64_t>(scalar); break;
    case ncclFloat16: value.h = FloatToHalfBits(static_cast<float>(scalar)); break;
    case ncclBfloat16: value.h = FloatToBfloat16Bits(static_cast<float>(scalar)); break;
    case ncclFloat32: value.f = static_cast<float>(scalar); break;
    case ncclFloat64: value.d = scalar; break;
    default:
      return Status::NotSupported(StrCat(where, ": PREMUL_SUM does not support NCCL datatype ", dtype));
  }
  ncclRedOp_t op;
  ncclResult_t r = ncclRedOpCreatePreMulSum(&op, &value, T(dtype), ncclScalarHostImmediate, comm);
  if (r != ncclSuccess) {
    return MapNcclResult(r, NcclPhase::kEnqueue, StrCat(where, ": ncclRedOpCreatePreMulSum"), ncclGetLastError(comm));
  }
  PreMulSumOp out;
  out.op = static_cast<int>(op);
  out.cleanup = [op](ncclComm_t c) { ncclRedOpDestroy(op, c); };
  return out;
}

}  // namespace commkit::comm::nccl
