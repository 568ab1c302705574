#include "rendezvous/wire_decoder.h"

#include <algorithm>
#include <cstring>

#include "common/error.h"
#include "rendezvous/wire_layout.h"

namespace dtrun::rendezvous::wire {

using detail::info;
using detail::kRequestPrograms;
using detail::replyProgram;

namespace detail {

void FieldReader::start(const Program* program, std::vector<std::string>* keys,
                        std::vector<Bytes>* values, std::uint8_t* status, std::uint32_t* word,
                        std::int64_t* number, std::uint64_t presetItems) {
  program_ = program;
  keys_ = keys;
  values_ = values;
  status_ = status;
  word_ = word;
  number_ = number;
  head_.clear();
  field_ = 0;
  groupPos_ = 0;
  itemsLeft_ = presetItems;
  inString_ = false;
  string_ = nullptr;
  stringLeft_ = 0;
  buffered_ = 0;
}

// Reads an n-byte little-endian number, keeping a partial one in head_.
DecodeStatus FieldReader::fixed(std::string_view& in, std::size_t n, std::uint64_t* v) {
  if (head_.empty() && in.size() >= n) {
    *v = 0;
    std::memcpy(v, in.data(), n);  // little-endian hosts only (x86-64, arm64)
    in.remove_prefix(n);
    return DecodeStatus::kComplete;
  }
  std::size_t take = std::min(n - head_.size(), in.size());
  head_.append(in.data(), take);
  in.remove_prefix(take);
  if (head_.size() < n) return DecodeStatus::kNeedMore;
  *v = 0;
  std::memcpy(v, head_.data(), n);
  head_.clear();
  return DecodeStatus::kComplete;
}

DecodeStatus FieldReader::run(std::string_view& in, std::string* error) {
  while (program_) {
    if (inString_) {
      std::size_t take = static_cast<std::size_t>(std::min<std::uint64_t>(stringLeft_, in.size()));
      string_->append(in.data(), take);
      in.remove_prefix(take);
      stringLeft_ -= take;
      buffered_ += take;
      if (stringLeft_ > 0) return DecodeStatus::kNeedMore;
      inString_ = false;
    } else {
      const Program& p = *program_;
      Field f;
      if (field_ < p.prefixLen) {
        f = p.prefix[field_];
      } else if (p.groupLen != 0 && itemsLeft_ > 0) {
        f = p.group[groupPos_];
      } else {
        program_ = nullptr;
        return DecodeStatus::kComplete;
      }
      std::size_t size = f == Field::kStatus ? 1 : f == Field::kWord ? 4 : 8;
      std::uint64_t v = 0;
      if (fixed(in, size, &v) == DecodeStatus::kNeedMore) return DecodeStatus::kNeedMore;
      switch (f) {
        case Field::kStatus:
          *status_ = static_cast<std::uint8_t>(v);
          break;
        case Field::kWord:
          *word_ = static_cast<std::uint32_t>(v);
          break;
        case Field::kNumber:
          *number_ = static_cast<std::int64_t>(v);
          break;
        case Field::kCount:
          if (v > limits_.maxKeysPerRequest) {
            *error = "request names " + std::to_string(v) + " keys, limit " +
                     std::to_string(limits_.maxKeysPerRequest);
            return DecodeStatus::kBad;
          }
          itemsLeft_ = v;
          break;
        case Field::kPresent:
          *number_ = static_cast<std::int64_t>(v);
          itemsLeft_ = *number_ > 0 ? 1 : 0;
          break;
        case Field::kListLen:
          *number_ = static_cast<std::int64_t>(v);
          if (*number_ < 0 || v > limits_.maxKeysPerRequest * std::uint64_t{1024}) {
            *error = "implausible key count " + std::to_string(*number_);
            return DecodeStatus::kBad;
          }
          itemsLeft_ = v;
          break;
        case Field::kKey:
        case Field::kValue: {
          const bool isKey = f == Field::kKey;
          const std::size_t limit = isKey ? limits_.maxKeySize : limits_.maxValueSize;
          if (v > limit) {
            *error = tooLong(isKey ? "key" : "value", v, limit);
            return DecodeStatus::kBad;
          }
          if (buffered_ + kPerArgument + v > limits_.maxRequestBytes) {
            *error = "frame of more than " + std::to_string(limits_.maxRequestBytes) +
                     " bytes exceeds the limit of bytes a connection may buffer";
            return DecodeStatus::kBad;
          }
          auto& list = isKey ? *keys_ : *values_;
          list.emplace_back();
          string_ = &list.back();
          buffered_ += kPerArgument;
          stringLeft_ = v;
          inString_ = true;  // no reserve: only bytes that arrive take memory
          break;
        }
      }
      if (field_ < p.prefixLen) {
        ++field_;
      } else if (++groupPos_ == p.groupLen) {
        groupPos_ = 0;
        --itemsLeft_;
      }
    }
  }
  return DecodeStatus::kComplete;
}

}  // namespace detail

DecodeStatus RequestDecoder::step(std::string_view& in, DecodeResult& result) {
  const std::size_t before = in.size();
  DecodeStatus s = stepFrame(in, result);
  received_ = s == DecodeStatus::kComplete ? 0 : received_ + (before - in.size());
  return s;
}

DecodeStatus RequestDecoder::stepFrame(std::string_view& in, DecodeResult& result) {
  if (!reader_.active()) {
    if (in.empty()) return DecodeStatus::kNeedMore;
    const auto code = static_cast<std::uint8_t>(in[0]);
    auto op = opOf(dialect_, code);
    if (!op) {
      result.error =
          "unknown opcode " + std::to_string(code) +
          (dialect_ == Dialect::kTorch113 ? " (torch 1.13 table)" : " (torch 2.x table)");
      return DecodeStatus::kBad;
    }
    in.remove_prefix(1);
    // Cleared, not replaced: the vectors keep their capacity from one request to the next.
    req_.keys.clear();
    req_.values.clear();
    req_.number = 0;
    req_.word = 0;
    req_.op = *op;
    reader_.start(&kRequestPrograms[static_cast<std::size_t>(info(*op).layout)], &req_.keys,
                  &req_.values, nullptr, &req_.word, &req_.number, 0);
  }
  DecodeStatus s = reader_.run(in, &result.error);
  if (s == DecodeStatus::kBad) result.error = std::string(opName(req_.op)) + ": " + result.error;
  return s;
}

DecodeResult RequestDecoder::feed(std::string_view data) {
  DecodeResult result;
  std::string_view in = data;
  if (dialect_ == Dialect::kUnknown) {
    // A connection's first bytes decide its table: up to 5 of them are held until they do.
    std::size_t take = std::min<std::size_t>(5 - detect_.size(), in.size());
    detect_.append(in.data(), take);
    in.remove_prefix(take);
    dialect_ = detectDialect(detect_);
    if (dialect_ == Dialect::kUnknown) {
      result.consumed = data.size();
      return result;
    }
    // Give back what detection took beyond what it needed, then decode the held bytes first.
    std::string held = std::move(detect_);
    detect_.clear();
    std::string_view h = held;
    result.status = step(h, result);
    if (result.status == DecodeStatus::kBad) return result;
    if (result.status == DecodeStatus::kComplete && !h.empty()) {
      // Only a whole VALIDATE fits in the first 5 bytes, so this cannot happen; refuse anyway.
      result.status = DecodeStatus::kBad;
      result.error = "request shorter than its dialect check";
      return result;
    }
    if (result.status == DecodeStatus::kComplete) {
      result.consumed = data.size() - in.size();
      return result;
    }
  }
  result.status = step(in, result);
  result.consumed = data.size() - in.size();
  return result;
}

void ReplyDecoder::expect(const Request& request) {
  if (!hasReply(request.op)) {
    throw ProtocolError(std::string(opName(request.op)) + " has no reply to wait for");
  }
  op_ = request.op;
  reply_.status = 0;
  reply_.word = 0;
  reply_.number = 0;
  reply_.values.clear();
  reader_.start(&replyProgram(request.op), &unusedKeys_, &reply_.values, &reply_.status,
                &reply_.word, &reply_.number,
                request.op == Op::kMultiGet || request.op == Op::kHeard ? request.keys.size() : 0);
}

DecodeResult ReplyDecoder::feed(std::string_view data) {
  DecodeResult result;
  std::string_view in = data;
  result.status = reader_.run(in, &result.error);
  if (result.status == DecodeStatus::kBad) {
    result.error = std::string("reply to ") + opName(op_) + ": " + result.error;
  }
  result.consumed = data.size() - in.size();
  return result;
}

DecodeResult decodeRequest(Dialect dialect, std::string_view data, const Limits& limits,
                           Request* out) {
  RequestDecoder decoder(limits);
  decoder.setDialect(dialect);
  DecodeResult r = decoder.feed(data);
  if (r.status == DecodeStatus::kComplete) {
    *out = std::move(decoder.request());
  } else {
    r.consumed = 0;
  }
  return r;
}

DecodeResult decodeReply(const Request& request, std::string_view data, const Limits& limits,
                         Reply* out) {
  ReplyDecoder decoder(limits);
  decoder.expect(request);
  DecodeResult r = decoder.feed(data);
  if (r.status == DecodeStatus::kComplete) {
    *out = std::move(decoder.reply());
  } else {
    r.consumed = 0;
  }
  return r;
}

}  // namespace dtrun::rendezvous::wire
