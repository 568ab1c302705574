// store_probe: runs a sequence of Store operations through dtrun's TcpStore and prints one line
// per operation, for the interop tests to check against a real torch TCPStore server (and, in 2.x
// mode, against dtrun's own).
//
//   store_probe --port P [--host H] [--dialect 113|2] [--timeout-ms N] OP ARGS... [OP ARGS...]
//
// Values are given and printed as hex ("" for empty) so that any bytes survive the shell. Keys
// are plain text; lists are comma-separated. Operations and their output lines:
//   set K HEX                 set ok
//   get K TIMEOUT_MS          get HEX
//   add K DELTA               add N
//   cas K EXPECTED DESIRED    cas HEX
//   check K1,K2               check true|false
//   wait K1,K2 TIMEOUT_MS     wait ok
//   delete K                  delete true|false
//   numkeys                   numkeys N
//   multiget K1,K2 TIMEOUT_MS multiget HEX,HEX
//   multiset K1=HEX,K2=HEX    multiset ok
//   append K HEX              append ok
// An operation that throws prints "OP <ErrorClass>" (the message goes to stderr) and the probe
// carries on: TcpStore reconnects on the next call. Exit status: 0, or 2 for bad usage.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/error.h"
#include "rendezvous/tcp_store.h"

using namespace dtrun::rendezvous;
using std::chrono::milliseconds;

namespace {

std::string toHex(const std::string& bytes) {
  static const char* kDigits = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out += kDigits[c >> 4];
    out += kDigits[c & 15];
  }
  return out;
}

std::string fromHex(const std::string& hex) {
  if (hex.size() % 2 != 0) throw std::invalid_argument("odd-length hex '" + hex + "'");
  std::string out;
  for (std::size_t i = 0; i < hex.size(); i += 2) {
    out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  }
  return out;
}

std::vector<std::string> split(const std::string& list) {
  std::vector<std::string> out;
  if (list.empty()) return out;
  std::size_t start = 0;
  for (;;) {
    auto comma = list.find(',', start);
    out.push_back(list.substr(start, comma - start));
    if (comma == std::string::npos) return out;
    start = comma + 1;
  }
}

[[noreturn]] void usage(const std::string& why) {
  std::cerr << "store_probe: " << why
            << "\nusage: store_probe --port P [--host H] [--dialect 113|2] [--timeout-ms N] "
               "OP ARGS...\n";
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  TcpStoreOptions options;
  options.dialect = wire::Dialect::kTorch113;
  options.connectTimeout = std::chrono::seconds(30);
  options.timeout = std::chrono::seconds(30);
  std::size_t i = 0;
  auto next = [&](const std::string& what) -> std::string {
    if (i >= args.size()) usage(what + ": missing argument");
    return args[i++];
  };
  bool havePort = false;
  while (i < args.size() && args[i].rfind("--", 0) == 0) {
    std::string flag = next("flag");
    if (flag == "--port") {
      options.port = static_cast<std::uint16_t>(std::stoi(next(flag)));
      havePort = true;
    } else if (flag == "--host") {
      options.host = next(flag);
    } else if (flag == "--dialect") {
      std::string d = next(flag);
      if (d == "113") {
        options.dialect = wire::Dialect::kTorch113;
      } else if (d == "2") {
        options.dialect = wire::Dialect::kTorch2;
      } else {
        usage("--dialect: expected 113 or 2");
      }
    } else if (flag == "--timeout-ms") {
      options.timeout = milliseconds(std::stoll(next(flag)));
    } else {
      usage("unknown flag " + flag);
    }
  }
  if (!havePort) usage("--port is required");

  std::unique_ptr<TcpStore> store;
  try {
    store = std::make_unique<TcpStore>(options);
  } catch (const dtrun::Error& e) {
    std::cerr << "store_probe: " << e.what() << "\n";
    std::cout << "connect ConnectionError" << std::endl;
    return 1;
  }

  while (i < args.size()) {
    const std::string op = next("operation");
    std::string line = op;
    // Appends " <word>" in place: `line += " " + word` makes GCC 12 at -O3 report a bogus
    // -Wrestrict overlap inside std::string's insert (a known false positive, GCC bug 105329).
    auto result = [&line](const std::string& word) { line.append(1, ' ').append(word); };
    try {
      if (op == "set") {
        std::string k = next(op);
        store->set(k, fromHex(next(op)));
        line += " ok";
      } else if (op == "get") {
        std::string k = next(op);
        result(toHex(store->get(k, milliseconds(std::stoll(next(op))))));
      } else if (op == "add") {
        std::string k = next(op);
        result(std::to_string(store->add(k, std::stoll(next(op)))));
      } else if (op == "cas") {
        std::string k = next(op);
        std::string expected = fromHex(next(op));
        result(toHex(store->compareSet(k, expected, fromHex(next(op)))));
      } else if (op == "check") {
        line += store->check(split(next(op))) ? " true" : " false";
      } else if (op == "wait") {
        auto keys = split(next(op));
        store->wait(keys, milliseconds(std::stoll(next(op))));
        line += " ok";
      } else if (op == "delete") {
        line += store->deleteKey(next(op)) ? " true" : " false";
      } else if (op == "numkeys") {
        result(std::to_string(store->numKeys()));
      } else if (op == "multiget") {
        auto keys = split(next(op));
        auto values = store->multiGet(keys, milliseconds(std::stoll(next(op))));
        line += ' ';
        for (std::size_t v = 0; v < values.size(); ++v) {
          if (v > 0) line += ',';
          line += toHex(values[v]);
        }
      } else if (op == "multiset") {
        std::vector<std::string> keys;
        std::vector<Bytes> values;
        for (const auto& kv : split(next(op))) {
          auto eq = kv.find('=');
          if (eq == std::string::npos) usage("multiset: expected K=HEX, got '" + kv + "'");
          keys.push_back(kv.substr(0, eq));
          values.push_back(fromHex(kv.substr(eq + 1)));
        }
        store->multiSet(keys, values);
        line += " ok";
      } else if (op == "append") {
        std::string k = next(op);
        store->append(k, fromHex(next(op)));
        line += " ok";
      } else {
        usage("unknown operation '" + op + "'");
      }
    } catch (const dtrun::TimeoutError& e) {
      std::cerr << "store_probe: " << op << ": " << e.what() << "\n";
      line += " TimeoutError";
    } catch (const dtrun::ConnectionError& e) {
      std::cerr << "store_probe: " << op << ": " << e.what() << "\n";
      line += " ConnectionError";
    } catch (const dtrun::ProtocolError& e) {
      std::cerr << "store_probe: " << op << ": " << e.what() << "\n";
      line += " ProtocolError";
    } catch (const dtrun::Error& e) {
      std::cerr << "store_probe: " << op << ": " << e.what() << "\n";
      line += " Error";
    }
    std::cout << line << std::endl;  // flushed per line: a test may read while we block
  }
  return 0;
}
