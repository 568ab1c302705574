// The store protocol's decoders: requests as the server receives them, replies as a client does,
// both resumable (any split of the bytes) and bounded before they allocate (wire::Limits). The
// frame layouts they run are rendezvous/wire_layout.h's; the encoders are rendezvous/wire.h's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "rendezvous/wire.h"

namespace dtrun::rendezvous::wire {

enum class DecodeStatus { kComplete, kNeedMore, kBad };

struct DecodeResult {
  DecodeStatus status = DecodeStatus::kNeedMore;
  std::size_t consumed = 0;  // bytes of one whole request when kComplete
  std::string error;         // why, when kBad
};

namespace detail {
// The field-by-field engine under RequestDecoder and ReplyDecoder: a frame is a list of fields
// (fixed-size numbers, length-prefixed strings, a list of groups), consumed as bytes arrive.
struct Program;
class FieldReader {
 public:
  explicit FieldReader(const Limits& limits) : limits_(limits) {}
  /// Starts a frame of `program`, written into these outputs.
  void start(const Program* program, std::vector<std::string>* keys, std::vector<Bytes>* values,
             std::uint8_t* status, std::uint32_t* word, std::int64_t* number,
             std::uint64_t presetItems);
  /// Takes bytes from `in` (advancing it); kComplete at the end of the frame, kNeedMore when
  /// `in` ran out, kBad with `error` set.
  DecodeStatus run(std::string_view& in, std::string* error);
  bool active() const { return program_ != nullptr; }
  std::size_t buffered() const { return buffered_; }

 private:
  DecodeStatus fixed(std::string_view& in, std::size_t n, std::uint64_t* v);

  const Limits& limits_;
  const Program* program_ = nullptr;
  std::vector<std::string>* keys_ = nullptr;
  std::vector<Bytes>* values_ = nullptr;
  std::uint8_t* status_ = nullptr;
  std::uint32_t* word_ = nullptr;
  std::int64_t* number_ = nullptr;
  std::string head_;  // bytes of a fixed-size field, still incomplete
  std::uint8_t field_ = 0;
  std::uint8_t groupPos_ = 0;
  std::uint64_t itemsLeft_ = 0;
  bool inString_ = false;
  std::string* string_ = nullptr;
  std::uint64_t stringLeft_ = 0;
  std::size_t buffered_ = 0;
};
}  // namespace detail

/// Decodes a connection's requests as their bytes arrive, in any pieces, in time linear in the
/// bytes: what a piece completes is copied into the request once and never looked at again.
/// Lengths and counts are checked against the limits before anything is allocated for them.
class RequestDecoder {
 public:
  explicit RequestDecoder(Limits limits = {}) : limits_(limits), reader_(limits_) {}
  RequestDecoder(const RequestDecoder&) = delete;
  RequestDecoder& operator=(const RequestDecoder&) = delete;

  /// Takes bytes from the front of `data` until one request is complete (kComplete; `consumed`
  /// says how many bytes it took, request() holds it until the next feed) or `data` runs out
  /// (kNeedMore; every byte was taken and is held). kBad: the frame breaks the protocol or a
  /// limit; the decoder is then unusable. The dialect is detected from the first bytes.
  DecodeResult feed(std::string_view data);
  /// The request last completed. Its buffers are reused by the next one.
  Request& request() { return req_; }
  Dialect dialect() const { return dialect_; }
  /// Forces the dialect (before the first feed).
  void setDialect(Dialect d) { dialect_ = d; }
  /// True while a request has started arriving and is not complete.
  bool midRequest() const { return reader_.active() || !detect_.empty(); }
  /// Bytes the request being received holds (what Limits::maxRequestBytes bounds).
  std::size_t buffered() const { return midRequest() ? reader_.buffered() + detect_.size() : 0; }
  /// Bytes of the request being received that have arrived (its frame so far).
  std::size_t received() const { return received_ + detect_.size(); }

 private:
  DecodeStatus step(std::string_view& in, DecodeResult& result);
  DecodeStatus stepFrame(std::string_view& in, DecodeResult& result);

  Limits limits_;
  detail::FieldReader reader_;
  Dialect dialect_ = Dialect::kUnknown;
  Request req_;
  std::string detect_;  // a connection's first bytes, until they tell the dialect
  std::size_t received_ = 0;
};

/// Decodes replies as their bytes arrive (the client's half of RequestDecoder).
class ReplyDecoder {
 public:
  explicit ReplyDecoder(Limits limits = {}) : limits_(limits), reader_(limits_) {}
  ReplyDecoder(const ReplyDecoder&) = delete;
  ReplyDecoder& operator=(const ReplyDecoder&) = delete;
  /// Expects the reply to `request` next; ProtocolError when the op has no reply.
  void expect(const Request& request);
  /// As RequestDecoder::feed, for the reply expected; reply() holds it once complete.
  DecodeResult feed(std::string_view data);
  Reply& reply() { return reply_; }

 private:
  Limits limits_;
  detail::FieldReader reader_;
  Op op_ = Op::kPing;
  Reply reply_;
  std::vector<std::string> unusedKeys_;
};

/// Decodes one request from the front of `data` into `out` (reusing its buffers). Never
/// allocates past `limits`. kNeedMore consumes nothing: the caller keeps the bytes. For a stream
/// that arrives in pieces use RequestDecoder, which does not start again from the front.
DecodeResult decodeRequest(Dialect dialect, std::string_view data, const Limits& limits,
                           Request* out);

/// Decodes the reply to `request` from the front of `data` (ReplyDecoder in one piece).
/// kNeedMore consumes nothing; kBad when a length exceeds `limits` (maxValueSize per value,
/// maxKeysPerRequest x 1024 entries for LIST_KEYS).
DecodeResult decodeReply(const Request& request, std::string_view data, const Limits& limits,
                         Reply* out);

}  // namespace dtrun::rendezvous::wire
