// Hostile and careless clients against the in-process server (issue 26): deep nesting, slow
// senders, half bodies, negative and huge lengths, pipelining, HTTP/1.0 streams, 256 stalled
// connections, cross-site and rebinding requests, form-typed bodies, the key's scheme and the
// 4xx log. Raw sockets on loopback; every wait is bounded and generous (a loaded 2-core machine).
// The signal, port and shutdown cases need the `gem serve` process: serve_process_test.sh.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>

#include "server/json_limits.h"
#include "server/server_harness.h"

namespace gem::test {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// One raw client connection.
class Raw {
 public:
  explicit Raw(int port) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ok_ = connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
    const int one = 1;
    setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  }
  ~Raw() {
    if (fd_ >= 0) close(fd_);
  }
  Raw(const Raw&) = delete;
  Raw& operator=(const Raw&) = delete;
  bool ok() const { return ok_; }
  bool send_all(const std::string& s) {
    size_t off = 0;
    while (off < s.size()) {
      const ssize_t n = ::send(fd_, s.data() + off, s.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return false;
      off += static_cast<size_t>(n);
    }
    return true;
  }
  // Reads what arrives within `timeout_s`; returns false at EOF/error (what came is in buf_).
  bool read_some(double timeout_s) {
    pollfd p{};
    p.fd = fd_;
    p.events = POLLIN;
    if (poll(&p, 1, static_cast<int>(timeout_s * 1000)) <= 0) return true;
    char b[65536];
    const ssize_t n = recv(fd_, b, sizeof(b), 0);
    if (n <= 0) {
      eof_ = true;
      return false;
    }
    buf_.append(b, static_cast<size_t>(n));
    return true;
  }
  // Reads until the peer closes or `timeout_s` passes.
  std::string read_to_close(double timeout_s) {
    const auto t0 = Clock::now();
    while (!eof_ && seconds_since(t0) < timeout_s) read_some(0.1);
    return buf_;
  }
  bool closed_within(double timeout_s) {
    read_to_close(timeout_s);
    return eof_;
  }

  struct Reply {
    int status = 0;
    std::string head;
    std::string body;
  };
  // Reads one whole response (Content-Length, chunked or close-delimited) within `timeout_s`.
  bool read_reply(Reply* r, double timeout_s) {
    const auto t0 = Clock::now();
    size_t he;
    while ((he = buf_.find("\r\n\r\n")) == std::string::npos) {
      if (eof_ || seconds_since(t0) > timeout_s) return false;
      read_some(0.1);
    }
    r->head = buf_.substr(0, he + 2);
    r->status = std::atoi(r->head.c_str() + 9);
    std::string rest = buf_.substr(he + 4);
    std::string lower = r->head;
    std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
    if (r->status == 100) {  // interim answer: the real one follows
      buf_ = rest;
      return read_reply(r, timeout_s - seconds_since(t0));
    }
    const size_t cl = lower.find("content-length: ");
    if (cl != std::string::npos) {
      const size_t n = std::stoul(lower.substr(cl + 16));
      while (buf_.size() - (he + 4) < n) {
        if (eof_ || seconds_since(t0) > timeout_s) return false;
        read_some(0.1);
      }
      r->body = buf_.substr(he + 4, n);
      buf_.erase(0, he + 4 + n);
      return true;
    }
    if (lower.find("transfer-encoding: chunked") != std::string::npos) {
      size_t pos = he + 4;
      std::string body;
      while (true) {
        size_t eol;
        while ((eol = buf_.find("\r\n", pos)) == std::string::npos) {
          if (eof_ || seconds_since(t0) > timeout_s) return false;
          read_some(0.1);
        }
        const size_t size = std::stoul(buf_.substr(pos, eol - pos), nullptr, 16);
        while (buf_.size() < eol + 2 + size + 2) {
          if (eof_ || seconds_since(t0) > timeout_s) return false;
          read_some(0.1);
        }
        body += buf_.substr(eol + 2, size);
        pos = eol + 2 + size + 2;
        if (size == 0) break;
      }
      r->body = body;
      buf_.erase(0, pos);
      return true;
    }
    read_to_close(timeout_s - seconds_since(t0));
    r->body = buf_.substr(he + 4);
    buf_.clear();
    return eof_;
  }

 private:
  int fd_ = -1;
  bool ok_ = false;
  bool eof_ = false;
  std::string buf_;
};

std::string post(const std::string& body, const std::string& extra_headers = "",
                 const std::string& path = "/v1/chat/completions") {
  return "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" +
         extra_headers + "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

std::string get(const std::string& path, const std::string& extra_headers = "") {
  return "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\n" + extra_headers + "\r\n";
}

// GET /health on a fresh connection; the seconds it took, or 1e9 with no 200.
double health_latency(int port, double timeout_s = 10) {
  const auto t0 = Clock::now();
  Raw c(port);
  Raw::Reply r;
  if (!c.ok() || !c.send_all(get("/health")) || !c.read_reply(&r, timeout_s) || r.status != 200) {
    return 1e9;
  }
  return seconds_since(t0);
}

std::string nested(int depth, const std::string& open, const std::string& close,
                   const std::string& inner = "1") {
  std::string s;
  s.reserve(depth * (open.size() + close.size()) + inner.size());
  for (int i = 0; i < depth; ++i) s += open;
  s += inner;
  for (int i = 0; i < depth; ++i) s += close;
  return s;
}

// The payload of a chunked body.
std::string dechunk(const std::string& s) {
  std::string out;
  size_t pos = 0;
  while (pos < s.size()) {
    const size_t eol = s.find("\r\n", pos);
    if (eol == std::string::npos) break;
    const size_t n = std::stoul(s.substr(pos, eol - pos), nullptr, 16);
    if (n == 0) break;
    out += s.substr(eol + 2, n);
    pos = eol + 2 + n + 2;
  }
  return out;
}

const std::string kHello = R"({"messages":[{"role":"user","content":"Say hello"}],"max_tokens":8})";

TEST(Hostile, DepthScannerIgnoresBracketsInStrings) {
  EXPECT_TRUE(server::json_depth_within(R"({"a":"[[[[[[[[[[{{{{{{{{\"[[["})", 2));
  EXPECT_TRUE(server::json_depth_within("[[1]]", 2));
  size_t at = 0;
  EXPECT_FALSE(server::json_depth_within("[[[1]]]", 2, &at));
  EXPECT_EQ(at, 2u);
  EXPECT_FALSE(server::json_depth_within(nested(100000, "[", "]"), 64));
}

// Issue 26 case 1: each of these killed the process (stack overflow) before.
TEST(Hostile, DeepNestingIs400NamingTheLimit) {
  TestServer ts;
  const std::string deep_params = nested(70000, "{\"a\":", "}");
  const std::string deep_args_obj = nested(100000, "{\"a\":", "}");
  json deep_args_str_call = {
      {"messages",
       {{{"role", "user"}, {"content", "hi"}},
        {{"role", "assistant"},
         {"content", nullptr},
         {"tool_calls",
          {{{"id", "c1"},
            {"type", "function"},
            {"function", {{"name", "f"}, {"arguments", nested(100000, "{\"a\":", "}")}}}}}}},
        {{"role", "tool"}, {"tool_call_id", "c1"}, {"content", "ok"}}}}};
  const std::vector<std::string> bodies = {
      R"({"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f","parameters":)" +
          deep_params + "}}]}",
      R"({"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":)" +
          deep_args_obj + "}}]}]}",
      deep_args_str_call.dump(),
      R"({"messages":[{"role":"user","content":"hi"}],"x_unknown":)" + nested(600000, "[", "]") + "}",
  };
  for (size_t i = 0; i < bodies.size(); ++i) {
    Raw c(ts.port());
    ASSERT_TRUE(c.send_all(post(bodies[i]))) << i;
    Raw::Reply r;
    ASSERT_TRUE(c.read_reply(&r, 30)) << "case " << i << ": no answer (crashed?)";
    EXPECT_EQ(r.status, 400) << i << ": " << r.body;
    EXPECT_NE(r.body.find("limit of 64"), std::string::npos) << i << ": " << r.body;
  }
  EXPECT_LT(health_latency(ts.port()), 10.0);
  // Within the limit: the same shapes are fine.
  Raw c(ts.port());
  ASSERT_TRUE(c.send_all(post(R"({"messages":[{"role":"user","content":"Say hello"}],"max_tokens":4,"x":)" +
                              nested(50, "[", "]") + "}")));
  Raw::Reply r;
  ASSERT_TRUE(c.read_reply(&r, 30));
  EXPECT_EQ(r.status, 200) << r.body;
}

TEST(Hostile, NestingLimitIsConfigurable) {
  server::ServerOptions o;
  o.max_json_depth = 16;
  TestServer ts(o);
  Raw c(ts.port());
  ASSERT_TRUE(c.send_all(post(R"({"messages":[{"role":"user","content":"hi"}],"x":)" +
                              nested(20, "[", "]") + "}")));
  Raw::Reply r;
  ASSERT_TRUE(c.read_reply(&r, 30));
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.body.find("limit of 16"), std::string::npos) << r.body;
  server::set_max_json_depth(server::kDefaultMaxJsonDepth);  // process-wide: restore
}

// Issue 26 case 2: 17 slow senders blocked every route for up to 600 s before.
TEST(Hostile, SlowHeadersAndHalfBodiesCostNoWorker) {
  server::ServerOptions o;
  o.header_timeout_s = 3;
  o.body_timeout_s = 3;
  TestServer ts(o);
  std::vector<std::unique_ptr<Raw>> slow;
  for (int i = 0; i < 40; ++i) {
    auto c = std::make_unique<Raw>(ts.port());
    ASSERT_TRUE(c->ok());
    // Half of them: a few header bytes; the others: headers and part of the body.
    if (i % 2 == 0) {
      ASSERT_TRUE(c->send_all("POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "));
    } else {
      ASSERT_TRUE(c->send_all(post(kHello).substr(0, post(kHello).size() - 10)));
    }
    slow.push_back(std::move(c));
  }
  // Every route still answers at once, chat included.
  EXPECT_LT(health_latency(ts.port()), 1.5);
  {
    const auto t0 = Clock::now();
    Raw c(ts.port());
    ASSERT_TRUE(c.send_all(post(kHello)));
    Raw::Reply r;
    ASSERT_TRUE(c.read_reply(&r, 30));
    EXPECT_EQ(r.status, 200) << r.body;
    EXPECT_LT(seconds_since(t0), 5.0);
  }
  // One byte a second keeps a connection no longer than the header deadline.
  {
    Raw trickle(ts.port());
    const std::string head = "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: aaaaaaaaaa\r\n\r\n";
    const auto t0 = Clock::now();
    bool closed = false;
    for (size_t i = 0; i < head.size() && seconds_since(t0) < 15; ++i) {
      if (!trickle.send_all(head.substr(i, 1))) {
        closed = true;
        break;
      }
      if (!trickle.read_some(1.0)) {
        closed = true;
        break;
      }
    }
    std::string got = trickle.read_to_close(10);
    EXPECT_NE(got.find(" 408 "), std::string::npos) << got;
    EXPECT_LT(seconds_since(t0), 12.0);
    (void)closed;
  }
  // The stalled ones get 408 and are closed once their deadlines pass.
  for (auto& c : slow) {
    const std::string got = c->read_to_close(15);
    EXPECT_NE(got.find("HTTP/1.1 408"), std::string::npos) << got;
    EXPECT_NE(got.find("did not arrive within 3 s"), std::string::npos) << got;
  }
}

// Issue 26 case 2: Content-Length: -5 held a thread with no answer.
TEST(Hostile, BadContentLengthsAnsweredAtOnce) {
  server::ServerOptions o;
  o.max_body_bytes = 1 << 20;
  TestServer ts(o);
  struct Case {
    std::string length;
    int status;
    std::string says;
  };
  const std::vector<Case> cases = {
      {"-5", 400, "Content-Length '-5'"},
      {"abc", 400, "Content-Length 'abc'"},
      {"99999999999999999999999", 400, "not a non-negative integer"},
      {"9999999999", 413, "exceeds the limit of 1048576 bytes"},
      {"1048577", 413, "--max-body"},
  };
  for (const Case& k : cases) {
    const auto t0 = Clock::now();
    Raw c(ts.port());
    ASSERT_TRUE(c.send_all("POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: " +
                           k.length + "\r\n\r\n{\"mess"));
    Raw::Reply r;
    ASSERT_TRUE(c.read_reply(&r, 10)) << k.length;
    EXPECT_EQ(r.status, k.status) << k.length << ": " << r.body;
    EXPECT_NE(r.body.find(k.says), std::string::npos) << r.body;
    EXPECT_LT(seconds_since(t0), 3.0) << k.length;
    EXPECT_TRUE(c.closed_within(5)) << k.length;
  }
  EXPECT_LT(health_latency(ts.port()), 5.0);
}

// Issue 26 case 7: pipelined requests after the first were dropped.
TEST(Hostile, PipelinedRequestsAnsweredInOrder) {
  TestServer ts;
  Raw c(ts.port());
  ASSERT_TRUE(c.send_all(get("/health") + post(kHello) + get("/v1/models") + get("/nope") +
                         get("/props")));
  Raw::Reply r;
  ASSERT_TRUE(c.read_reply(&r, 30));
  EXPECT_EQ(r.status, 200);
  EXPECT_NE(r.body.find("\"ok\""), std::string::npos) << r.body;
  ASSERT_TRUE(c.read_reply(&r, 30));
  EXPECT_EQ(r.status, 200);
  EXPECT_NE(r.body.find("chat.completion"), std::string::npos) << r.body;
  ASSERT_TRUE(c.read_reply(&r, 30));
  EXPECT_EQ(r.status, 200);
  EXPECT_NE(r.body.find("\"list\""), std::string::npos) << r.body;
  ASSERT_TRUE(c.read_reply(&r, 30));
  EXPECT_EQ(r.status, 404);
  ASSERT_TRUE(c.read_reply(&r, 30));
  EXPECT_EQ(r.status, 200);
  EXPECT_NE(r.body.find("n_ctx"), std::string::npos) << r.body;
}

// Issue 26 case 7: an HTTP/1.0 client was sent a chunked stream.
TEST(Hostile, Http10StreamIsCloseDelimited) {
  TestServer ts;
  Raw c(ts.port());
  const std::string body = R"({"messages":[{"role":"user","content":"Say hello"}],"stream":true})";
  ASSERT_TRUE(c.send_all("POST /v1/chat/completions HTTP/1.0\r\nContent-Type: application/json\r\n"
                         "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body));
  const std::string got = c.read_to_close(30);
  ASSERT_EQ(got.rfind("HTTP/1.0 200", 0), 0u) << got;
  const std::string head = got.substr(0, got.find("\r\n\r\n"));
  EXPECT_EQ(head.find("chunked"), std::string::npos) << head;
  EXPECT_NE(head.find("Connection: close"), std::string::npos) << head;
  Sse s = parse_sse(got.substr(got.find("\r\n\r\n") + 4));
  EXPECT_TRUE(s.done);
  EXPECT_EQ(s.content, "Hello there, friend!");
}

// The headline figure: with 256 stalled connections open, /health and chat answer within 1 s.
TEST(Hostile, TwoHundredFiftySixStalledConnections) {
  TestServer ts;
  std::vector<std::unique_ptr<Raw>> stalled;
  for (int i = 0; i < 256; ++i) {
    auto c = std::make_unique<Raw>(ts.port());
    ASSERT_TRUE(c->ok()) << i;
    switch (i % 3) {
      case 0: break;  // connected, silent
      case 1: ASSERT_TRUE(c->send_all("GET /health HTTP/1.1\r\nHo")); break;
      default: ASSERT_TRUE(c->send_all(post(kHello).substr(0, 120))); break;
    }
    stalled.push_back(std::move(c));
  }
  std::vector<double> health;
  for (int i = 0; i < 5; ++i) health.push_back(health_latency(ts.port()));
  std::sort(health.begin(), health.end());
  const auto t0 = Clock::now();
  Raw chat(ts.port());
  ASSERT_TRUE(chat.send_all(post(R"({"messages":[{"role":"user","content":"Say hello"}],"stream":true})")));
  Raw::Reply first;
  // The stream's headers and first chunk come at once; the whole answer shortly after.
  ASSERT_TRUE(chat.read_reply(&first, 30));
  const double chat_s = seconds_since(t0);
  std::printf("256 stalled connections: /health median %.1f ms, max %.1f ms; streamed chat %.1f ms\n",
              health[2] * 1e3, health[4] * 1e3, chat_s * 1e3);
  EXPECT_LT(health[2], 1.0);
  EXPECT_LT(chat_s, 2.0);  // generous: the scripted model itself takes part of it
  EXPECT_EQ(first.status, 200);
  EXPECT_TRUE(parse_sse(first.body).done);
  // Stalled connections hold no worker: once the chat's worker lets go, none is busy.
  for (int i = 0; i < 500 && ts.server().n_active() != 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(ts.server().n_active(), 0);
}

// Slow readers: clients that pipeline many requests and never read their answers. The answers
// that do not fit the socket wait in the reactor, not in a worker, so two workers suffice.
TEST(Hostile, ClientsThatNeverReadHoldNoWorker) {
  server::ServerOptions o;
  o.n_http_threads = 2;
  TestServer ts(o);
  std::vector<int> fds;
  std::string burst;
  for (int i = 0; i < 20000; ++i) burst += get("/props");
  for (int k = 0; k < 4; ++k) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    const int small = 2048;  // a small window, so the server's writes soon block
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(ts.port()));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    // As much of the burst as the server takes within a second (it stops reading once the
    // answers back up).
    timeval tv{1, 0};
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    size_t off = 0;
    while (off < burst.size()) {
      const ssize_t n = send(fd, burst.data() + off, burst.size() - off, MSG_NOSIGNAL);
      if (n <= 0) break;
      off += static_cast<size_t>(n);
    }
    fds.push_back(fd);
  }
  // Long enough for the answers to fill the sockets (with the answers written by the workers,
  // both were stuck within a second and /health went unanswered).
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  const double s = health_latency(ts.port(), 5);
  std::printf("4 clients that never read: /health in %.1f ms\n", s * 1e3);
  EXPECT_LT(s, 1.0);
  for (int fd : fds) close(fd);
}

// --max-connections: the oldest connection not being answered makes room for a new one, so
// the descriptors a client can hold are bounded and a newcomer is always served.
TEST(Hostile, ConnectionCapClosesTheOldest) {
  server::ServerOptions o;
  o.max_connections = 16;
  TestServer ts(o);
  std::vector<std::unique_ptr<Raw>> idle;
  for (int i = 0; i < 40; ++i) {
    idle.push_back(std::make_unique<Raw>(ts.port()));
    ASSERT_TRUE(idle.back()->ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // a clear age order
  }
  EXPECT_LT(health_latency(ts.port()), 2.0);
  EXPECT_LE(ts.server().n_connections(), 16);
  int closed = 0;
  for (int i = 0; i < 20; ++i) closed += idle[i]->closed_within(0.2) ? 1 : 0;
  EXPECT_EQ(closed, 20);  // the oldest half went first
  EXPECT_FALSE(idle.back()->closed_within(0.2));
}

TEST(Hostile, IdleKeepAliveConnectionsAreClosed) {
  server::ServerOptions o;
  o.keep_alive_s = 1;
  TestServer ts(o);
  Raw c(ts.port());
  ASSERT_TRUE(c.send_all(get("/health")));
  Raw::Reply r;
  ASSERT_TRUE(c.read_reply(&r, 10));
  EXPECT_NE(r.head.find("Keep-Alive: timeout=1"), std::string::npos) << r.head;
  const auto t0 = Clock::now();
  EXPECT_TRUE(c.closed_within(10));
  EXPECT_GT(seconds_since(t0), 0.5);
}

// Issue 26 case 5: curl -d sends application/x-www-form-urlencoded; bodies over 8 KiB got 413.
TEST(Hostile, FormTypedBodyIsReadAsJson) {
  TestServer ts;
  std::string pad(20000, 'a');
  const std::string body = R"({"messages":[{"role":"user","content":"Say hello"}],"max_tokens":6,"x":")" + pad + "\"}";
  Raw c(ts.port());
  ASSERT_TRUE(c.send_all("POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                         "Content-Type: application/x-www-form-urlencoded\r\nContent-Length: " +
                         std::to_string(body.size()) + "\r\n\r\n" + body));
  Raw::Reply r;
  ASSERT_TRUE(c.read_reply(&r, 30));
  EXPECT_EQ(r.status, 200) << r.body;
}

TEST(Hostile, ExpectContinueAndChunkedBodies) {
  TestServer ts;
  {
    Raw c(ts.port());
    ASSERT_TRUE(c.send_all("POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nExpect: 100-continue\r\n"
                           "Content-Length: " + std::to_string(kHello.size()) + "\r\n\r\n"));
    ASSERT_TRUE(c.read_some(10));
    ASSERT_TRUE(c.send_all(kHello));
    Raw::Reply r;
    ASSERT_TRUE(c.read_reply(&r, 30));
    EXPECT_EQ(r.status, 200) << r.body;
  }
  {
    Raw c(ts.port());
    std::string chunked = "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n";
    for (size_t i = 0; i < kHello.size(); i += 7) {
      const std::string part = kHello.substr(i, 7);
      char len[16];
      std::snprintf(len, sizeof(len), "%zx\r\n", part.size());
      chunked += len + part + "\r\n";
    }
    chunked += "0\r\n\r\n";
    ASSERT_TRUE(c.send_all(chunked));
    Raw::Reply r;
    ASSERT_TRUE(c.read_reply(&r, 30));
    EXPECT_EQ(r.status, 200) << r.body;
  }
}

// Issue 26 case 6: any page could drive the server (any Origin, any Host).
TEST(Hostile, CrossSiteAndRebindingRequestsRefused) {
  server::ServerOptions o;
  o.cors_origins = {"http://localhost:3000"};
  TestServer ts(o);
  const std::string own = "http://127.0.0.1:" + std::to_string(ts.port());
  struct Case {
    std::string headers;
    int status;
  };
  const std::vector<Case> cases = {
      {"Origin: http://evil.example\r\n", 403},
      {"Origin: null\r\n", 403},
      {"Origin: " + own + "\r\n", 200},
      {"Origin: http://localhost:3000\r\n", 200},
  };
  for (const Case& k : cases) {
    for (const std::string& req : {post(kHello, k.headers), get("/props", k.headers)}) {
      Raw c(ts.port());
      ASSERT_TRUE(c.send_all(req));
      Raw::Reply r;
      ASSERT_TRUE(c.read_reply(&r, 30));
      EXPECT_EQ(r.status, k.status) << k.headers << r.body;
      if (k.status == 403) {
        EXPECT_NE(r.body.find("--cors"), std::string::npos) << r.body;
      }
    }
  }
  // A text/plain POST from a page (no preflight) carries Origin: refused before any work.
  {
    Raw c(ts.port());
    ASSERT_TRUE(c.send_all("POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:" +
                           std::to_string(ts.port()) + "\r\nOrigin: http://evil.example\r\n"
                           "Content-Type: text/plain\r\nContent-Length: " +
                           std::to_string(kHello.size()) + "\r\n\r\n" + kHello));
    Raw::Reply r;
    ASSERT_TRUE(c.read_reply(&r, 30));
    EXPECT_EQ(r.status, 403);
  }
  // Preflight from an allowed origin.
  {
    Raw c(ts.port());
    ASSERT_TRUE(c.send_all("OPTIONS /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                           "Origin: http://localhost:3000\r\nAccess-Control-Request-Method: POST\r\n\r\n"));
    Raw::Reply r;
    ASSERT_TRUE(c.read_reply(&r, 10));
    EXPECT_EQ(r.status, 200);
    EXPECT_NE(r.head.find("Access-Control-Allow-Origin: http://localhost:3000"), std::string::npos) << r.head;
    EXPECT_NE(r.head.find("Access-Control-Allow-Methods"), std::string::npos);
  }
  // DNS rebinding: the page's own name, resolved to 127.0.0.1.
  for (const std::string& host : std::vector<std::string>{"evil.example", "evil.example:" + std::to_string(ts.port()), "192.168.1.2"}) {
    Raw c(ts.port());
    ASSERT_TRUE(c.send_all("GET /props HTTP/1.1\r\nHost: " + host + "\r\n\r\n"));
    Raw::Reply r;
    ASSERT_TRUE(c.read_reply(&r, 10));
    EXPECT_EQ(r.status, 403) << host;
    EXPECT_NE(r.body.find("DNS rebinding"), std::string::npos) << r.body;
  }
  for (const std::string host : {"localhost", "localhost:8080", "127.0.0.1", "[::1]:8080", "app.localhost"}) {
    Raw c(ts.port());
    ASSERT_TRUE(c.send_all("GET /props HTTP/1.1\r\nHost: " + host + "\r\n\r\n"));
    Raw::Reply r;
    ASSERT_TRUE(c.read_reply(&r, 10));
    EXPECT_EQ(r.status, 200) << host;
  }
}

// Issue 26 case 7: "bearer" was refused, and neither 4xx nor failed keys were logged.
TEST(Hostile, KeySchemeCaseInsensitiveAndRefusalsLogged) {
  server::ServerOptions o;
  o.api_key = "sekrit-key-123";
  TestServer ts(o);
  for (const std::string scheme : {"Bearer", "bearer", "BEARER"}) {
    Raw c(ts.port());
    ASSERT_TRUE(c.send_all(get("/v1/models", "Authorization: " + scheme + " sekrit-key-123\r\n")));
    Raw::Reply r;
    ASSERT_TRUE(c.read_reply(&r, 10));
    EXPECT_EQ(r.status, 200) << scheme;
  }
  testing::internal::CaptureStderr();
  {
    Raw c(ts.port());
    ASSERT_TRUE(c.send_all(get("/v1/models", "Authorization: Bearer wrong-guess-456\r\n")));
    Raw::Reply r;
    ASSERT_TRUE(c.read_reply(&r, 10));
    EXPECT_EQ(r.status, 401);
  }
  {
    Raw c(ts.port());
    ASSERT_TRUE(c.send_all(post(R"({"messages":"secret body text"})", "Authorization: Bearer sekrit-key-123\r\n")));
    Raw::Reply r;
    ASSERT_TRUE(c.read_reply(&r, 10));
    EXPECT_EQ(r.status, 400);
  }
  const std::string log = testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("127.0.0.1:"), std::string::npos) << log;
  EXPECT_NE(log.find("GET /v1/models -> 401"), std::string::npos) << log;
  EXPECT_NE(log.find("POST /v1/chat/completions -> 400"), std::string::npos) << log;
  EXPECT_EQ(log.find("sekrit-key-123"), std::string::npos) << log;
  EXPECT_EQ(log.find("wrong-guess-456"), std::string::npos) << log;
  EXPECT_EQ(log.find("secret body text"), std::string::npos) << log;
}

// Graceful shutdown in process: a stream that outlives the grace period ends with an error event
// and [DONE]; a short request finishes normally.
TEST(Hostile, ShutdownCutsStreamsWithErrorAndDone) {
  json script = {{"token_delay_ms", 50}, {"entries", json::array()}};
  auto ts = std::make_unique<TestServer>(server::ServerOptions{}, script);
  Raw c(ts->port());
  ASSERT_TRUE(c.send_all(post(R"({"messages":[{"role":"user","content":"go"}],"stream":true,"max_tokens":500})")));
  ASSERT_TRUE(c.read_some(10));  // the stream has started
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const auto t0 = Clock::now();
  const int n_cut = ts->server().shutdown(1.0);
  EXPECT_EQ(n_cut, 1);
  EXPECT_LT(seconds_since(t0), 8.0);
  const std::string got = c.read_to_close(10);
  ASSERT_NE(got.find("Transfer-Encoding: chunked"), std::string::npos) << got;
  Sse s = parse_sse(dechunk(got.substr(got.find("\r\n\r\n") + 4)));
  ASSERT_FALSE(s.chunks.empty());
  EXPECT_TRUE(s.chunks.back().contains("error")) << s.chunks.back();
  EXPECT_NE(s.chunks.back().dump().find("shutting down"), std::string::npos);
  EXPECT_TRUE(s.done);
  // Nothing new is accepted.
  Raw late(ts->port());
  EXPECT_TRUE(!late.ok() || !late.send_all(get("/health")) || late.closed_within(5));
}

}  // namespace
}  // namespace gem::test
