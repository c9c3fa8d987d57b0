// Argument validation and fingerprints of collective calls (private to commkit::comm).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

#include "commkit/comm/backend.h"

namespace commkit {

// InvalidArgument before any communication: null buffers with elements, sizes that overflow, roots
// or peers out of range, v-counts of the wrong length, bitwise reductions on floating types.
Status ValidateArgs(const CollectiveArgs& args, int rank, int size);

// What must agree across ranks for one call, as text ("allreduce f32 sum count=1024") and as a hash.
// The hash is ShapeHash() (everything but the sequence number) mixed with the sequence number.
std::string Describe(const CollectiveArgs& args);
std::uint64_t ShapeHash(const CollectiveArgs& args);
inline std::uint64_t FingerprintOf(std::uint64_t shape_hash, std::uint64_t sequence) {
  // A bijection of `sequence` for a given shape (and of the shape for a given sequence): successive
  // calls of one shape never share a fingerprint, nor do two shapes at one sequence number.
  std::uint64_t h = (shape_hash ^ sequence) * 0xff51afd7ed558ccdull;
  h ^= h >> 32;
  h *= 0xc4ceb9fe1a85ec53ull;
  h ^= h >> 29;
  return h >> 1;  // keep it positive so -h is representable
}
inline std::uint64_t FingerprintHash(const CollectiveArgs& args) { return FingerprintOf(ShapeHash(args), args.sequence); }

// The last call shape of one group that passed ValidateArgs() and the backend's Supports(), with its
// ShapeHash(): a call of the same shape (the usual training loop: the same collective, type, count
// and op every step) skips both and hashes only its sequence number. The shape is everything those
// depend on: kind, type, memory, op and its scalar (bit for bit), count, root, peer, tag and which
// buffers are null or alias; never the v-collectives (their count vectors are not kept). Not
// thread-safe: the group calls it under its lock.
class ShapeCache {
 public:
  // True, with the cached hash, when `args` has the stored shape.
  bool Lookup(const CollectiveArgs& args, std::uint64_t* shape_hash) const {
    if (!valid_ || !(Key::Of(args) == key_)) return false;
    *shape_hash = hash_;
    return true;
  }
  // Remembers `args`, which passed both checks, unless it is a v-collective.
  void Store(const CollectiveArgs& args, std::uint64_t shape_hash);

 private:
  struct Key {
    CollectiveKind kind;
    DataType dtype;
    MemoryKind memory;
    ReduceKind op;
    std::uint8_t buffers;  // 1: send is null, 2: recv is null, 4: send == recv
    int root, peer, tag;
    std::uint64_t scalar_bits;
    std::size_t count;
    static Key Of(const CollectiveArgs& a) {
      Key k{};
      k.kind = a.kind;
      k.dtype = a.dtype;
      k.memory = a.memory;
      k.op = a.op.kind;
      k.buffers = static_cast<std::uint8_t>((a.send == nullptr ? 1 : 0) | (a.recv == nullptr ? 2 : 0) |
                                            (a.send == a.recv ? 4 : 0));
      k.root = a.root;
      k.peer = a.peer;
      k.tag = a.tag;
      std::memcpy(&k.scalar_bits, &a.op.scalar, sizeof k.scalar_bits);
      k.count = a.count;
      return k;
    }
    bool operator==(const Key&) const = default;
  };
  Key key_{};
  std::uint64_t hash_ = 0;
  bool valid_ = false;
};

}  // namespace commkit
