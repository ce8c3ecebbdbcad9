// http.h: the epoll reactor, the request parser and the worker pool.
#include "server/http.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>

#include "base/log.h"
#include "base/timer.h"

namespace gem::server::http {

// One client connection. The reactor owns it; while a worker answers a request (kBusy) only
// that worker touches it.
struct Connection {
  // kWrite: the reactor delivers the rest of an answer the client was slow to take.
  enum class State { kIdle, kHead, kBody, kBusy, kWrite, kLinger };
  int fd = -1;
  std::string remote;
  std::string in;  // bytes read and not yet consumed
  State state = State::kIdle;
  double deadline = 0;
  double since = 0;  // accept time, for eviction
  // The request being read.
  std::unique_ptr<Request> req;
  size_t head_end = 0;  // bytes of the request line and headers, blank line included
  size_t scanned = 0;   // head bytes already searched for the blank line
  size_t content_length = 0;
  bool chunked = false;
  size_t chunk_pos = 0;  // next unparsed byte of a chunked body (offset into `in`)
  bool keep_alive = true;
  size_t lingered = 0;
  int n_requests = 0;  // requests handed to workers so far
  // The part of a whole (non-streamed) answer the socket did not take at once; the reactor
  // sends it, so a client that does not read holds no worker.
  std::string out;
  size_t out_off = 0;
  bool keep_after_out = false;
};

namespace {

double now() { return now_seconds(); }

std::string lower(std::string_view s) {
  std::string r(s);
  for (char& c : r) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return r;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

// Whether the comma-separated header value has `token` (case-insensitive).
bool has_token(std::string_view value, std::string_view token) {
  size_t pos = 0;
  while (pos <= value.size()) {
    size_t end = value.find(',', pos);
    if (end == std::string_view::npos) end = value.size();
    if (lower(trim(value.substr(pos, end - pos))) == token) return true;
    pos = end + 1;
  }
  return false;
}

const char* reason_phrase(int status) {
  switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 204: return "No Content";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 411: return "Length Required";
    case 413: return "Payload Too Large";
    case 414: return "URI Too Long";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return status < 400 ? "OK" : "Error";
  }
}

std::string address_of(const sockaddr_storage& ss) {
  char buf[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  if (ss.ss_family == AF_INET) {
    const auto& a = reinterpret_cast<const sockaddr_in&>(ss);
    inet_ntop(AF_INET, &a.sin_addr, buf, sizeof(buf));
    port = ntohs(a.sin_port);
    std::string out = buf;
    out += ':';
    out += std::to_string(port);
    return out;
  }
  if (ss.ss_family == AF_INET6) {
    const auto& a = reinterpret_cast<const sockaddr_in6&>(ss);
    inet_ntop(AF_INET6, &a.sin6_addr, buf, sizeof(buf));
    port = ntohs(a.sin6_port);
    std::string out = "[";
    out += buf;
    out += "]:";
    out += std::to_string(port);
    return out;
  }
  return "?";
}

// Writes all of `data` to a non-blocking socket, waiting for room at most `timeout_s` at a time.
bool write_all(int fd, std::string_view data, double timeout_s) {
  size_t off = 0;
  while (off < data.size()) {
    const ssize_t n = ::send(fd, data.data() + off, data.size() - off, MSG_NOSIGNAL);
    if (n > 0) {
      off += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{};
      p.fd = fd;
      p.events = POLLOUT;
      const int r = ::poll(&p, 1, static_cast<int>(timeout_s * 1000));
      if (r <= 0 || (p.revents & (POLLERR | POLLHUP | POLLNVAL)) != 0) return false;
      continue;
    }
    return false;
  }
  return true;
}

bool parse_decimal(std::string_view s, size_t* out) {
  if (s.empty() || s.size() > 19) return false;
  size_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + static_cast<size_t>(c - '0');
  }
  *out = v;
  return true;
}

// Raises the soft open-files limit to the hard one: each connection is a descriptor.
int raise_fd_limit() {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return 1024;
  if (rl.rlim_cur < rl.rlim_max) {
    rlimit want = rl;
    want.rlim_cur = std::min<rlim_t>(rl.rlim_max, 65536);
    if (want.rlim_cur > rl.rlim_cur && setrlimit(RLIMIT_NOFILE, &want) == 0) rl = want;
  }
  return static_cast<int>(std::min<rlim_t>(rl.rlim_cur, 1 << 20));
}

}  // namespace

const std::string* Request::header(std::string_view lower_name) const {
  for (const Header& h : headers) {
    if (h.name == lower_name) return &h.value;
  }
  return nullptr;
}

std::string Request::header_value(std::string_view lower_name) const {
  const std::string* v = header(lower_name);
  return v != nullptr ? *v : std::string();
}

// ---------------------------------------------------------------------------------------------
// Response

Response::Response(Server* server, Connection* conn, const Request* req)
    : server_(server), conn_(conn), req_(req) {}

Response::~Response() = default;

int Response::fd() const { return conn_->fd; }

void Response::add_header(std::string name, std::string value) {
  extra_.push_back(Header{std::move(name), std::move(value)});
}

std::string Response::head(int status, std::string_view content_type, const std::string& framing) {
  std::string h = "HTTP/1." + std::to_string(req_->minor_version == 0 ? 0 : 1) + " " +
                  std::to_string(status) + " " + reason_phrase(status) + "\r\n";
  if (!content_type.empty()) h += "Content-Type: " + std::string(content_type) + "\r\n";
  h += framing;
  for (const Header& e : extra_) h += e.name + ": " + e.value + "\r\n";
  if (conn_->keep_alive) {
    h += strprintf("Connection: keep-alive\r\nKeep-Alive: timeout=%d\r\n",
                   static_cast<int>(server_->options_.keep_alive_s));
  } else {
    h += "Connection: close\r\n";
  }
  h += "\r\n";
  return h;
}

void Response::log_status() {
  if (status_ < 400) return;
  GEM_LOG_WARN("http: %s %s %s -> %d%s%s", req_->remote.c_str(), req_->method.c_str(),
               req_->path.c_str(), status_, note_.empty() ? "" : ": ", note_.c_str());
}

bool Response::write_raw(std::string_view data) {
  if (failed_) return false;
  if (!write_all(conn_->fd, data, server_->options_.write_timeout_s)) {
    failed_ = true;
    conn_->keep_alive = false;
  }
  return !failed_;
}

void Response::send(int status, std::string_view content_type, std::string_view body) {
  if (started_) return;
  started_ = true;
  finished_ = true;
  status_ = status;
  if (server_->stopping_.load()) conn_->keep_alive = false;
  log_status();
  std::string out = head(status, content_type, "Content-Length: " + std::to_string(body.size()) + "\r\n");
  if (req_->method != "HEAD") out.append(body);
  // What the socket takes now goes now; the rest is left to the reactor (Connection::out), so
  // the worker is free at once even when the client does not read.
  size_t off = 0;
  while (off < out.size()) {
    const ssize_t n = ::send(conn_->fd, out.data() + off, out.size() - off, MSG_NOSIGNAL);
    if (n > 0) {
      off += static_cast<size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      break;
    } else {
      failed_ = true;
      conn_->keep_alive = false;
      return;
    }
  }
  if (off < out.size()) {
    conn_->out = out.substr(off);
    conn_->out_off = 0;
  }
}

bool Response::start_stream(int status, std::string_view content_type) {
  if (started_) return false;
  started_ = true;
  streaming_ = true;
  status_ = status;
  log_status();
  // HTTP/1.0 has no chunked coding: the body ends when the connection closes.
  if (req_->minor_version == 0 || server_->stopping_.load()) conn_->keep_alive = false;
  const std::string framing = req_->minor_version == 0 ? "" : "Transfer-Encoding: chunked\r\n";
  return write_raw(head(status, content_type, framing));
}

bool Response::write(std::string_view data) {
  if (!streaming_ || finished_) return false;
  if (data.empty()) return !failed_;
  if (req_->minor_version == 0) return write_raw(data);
  std::string chunk = strprintf("%zx\r\n", data.size());
  chunk.append(data);
  chunk += "\r\n";
  return write_raw(chunk);
}

bool Response::end_stream() {
  if (!streaming_ || finished_) return false;
  finished_ = true;
  if (req_->minor_version == 0) return !failed_;
  return write_raw("0\r\n\r\n");
}

void Response::drop() {
  finished_ = true;
  failed_ = true;
  conn_->keep_alive = false;
}

// ---------------------------------------------------------------------------------------------
// Server

Server::Server(Options options, Handler handler, ErrorBody error_body)
    : options_(std::move(options)), handler_(std::move(handler)),
      error_body_(std::move(error_body)) {}

Server::~Server() {
  stop();
  for (auto& [fd, c] : conns_) ::close(fd);
  conns_.clear();
  if (listen_fd_ >= 0) ::close(listen_fd_);
  if (epoll_fd_ >= 0) ::close(epoll_fd_);
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

Status Server::bind() {
  if (options_.port < 0 || options_.port > 65535) {
    return errorf("--port %d: out of range (0-65535; 0 picks a free port)", options_.port);
  }
  const int fd_limit = raise_fd_limit();
  // Room for the model file, logs and the listener besides the connections.
  options_.max_connections = std::max(16, std::min(options_.max_connections, fd_limit - 64));

  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const std::string port_str = std::to_string(options_.port);
  const int gai = getaddrinfo(options_.host.empty() ? nullptr : options_.host.c_str(),
                              port_str.c_str(), &hints, &res);
  if (gai != 0) {
    return errorf("--host %s: cannot resolve the address to bind (%s)", options_.host.c_str(),
                  gai_strerror(gai));
  }
  std::string last_error = "no address";
  for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    const int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                            ai->ai_protocol);
    if (fd < 0) {
      last_error = std::strerror(errno);
      continue;
    }
    // SO_REUSEADDR only lets a restarted server bind over TIME_WAIT connections; unlike
    // SO_REUSEPORT it never lets two listeners share the port.
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (ai->ai_family == AF_INET6) {
      const int zero = 0;
      setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
    }
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || ::listen(fd, options_.backlog) != 0) {
      last_error = std::strerror(errno);
      ::close(fd);
      continue;
    }
    listen_fd_ = fd;
    break;
  }
  freeaddrinfo(res);
  if (listen_fd_ < 0) {
    return errorf("cannot listen on %s port %d: %s", options_.host.c_str(), options_.port,
                  last_error.c_str());
  }
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&ss), &len);
  port_ = ss.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6&>(ss).sin6_port)
                                   : ntohs(reinterpret_cast<sockaddr_in&>(ss).sin_port);

  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (epoll_fd_ < 0 || wake_fd_ < 0) return errorf("epoll/eventfd: %s", std::strerror(errno));
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = listen_fd_;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, listen_fd_, &ev);
  ev.data.fd = wake_fd_;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev);
  return ok_status();
}

void Server::wake() {
  const uint64_t one = 1;
  if (wake_fd_ >= 0) (void)!::write(wake_fd_, &one, sizeof(one));
}

void Server::stop_accepting() {
  stopping_.store(true);
  wake();
}

void Server::stop() {
  stopping_.store(true);
  stop_requested_.store(true);
  wake();
}

void Server::run() {
  if (listen_fd_ < 0) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    quit_ = false;
  }
  for (int i = 0; i < std::max(1, options_.n_workers); ++i) {
    workers_.emplace_back([this] { worker(); });
  }
  loop();
  {
    std::lock_guard<std::mutex> lock(mu_);
    quit_ = true;
  }
  tasks_cv_.notify_all();
  for (std::thread& t : workers_) t.join();
  workers_.clear();
  reap_returned();
  for (auto& [fd, c] : conns_) ::close(fd);
  conns_.clear();
  n_connections_.store(0);
}

void Server::add_to_poll(Connection& c) {
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP;
  ev.data.fd = c.fd;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, c.fd, &ev);
}

void Server::loop() {
  std::vector<epoll_event> events(256);
  bool closed_listener = false;
  while (!stop_requested_.load()) {
    if (stopping_.load() && !closed_listener) {
      closed_listener = true;
      epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, listen_fd_, nullptr);
      ::close(listen_fd_);
      listen_fd_ = -1;
      // Connections not being answered are closed; the rest close after their answer.
      std::vector<int> idle;
      for (auto& [fd, c] : conns_) {
        if (c->state != Connection::State::kBusy && c->state != Connection::State::kWrite) {
          idle.push_back(fd);
        }
      }
      for (int fd : idle) close_conn(fd);
    }
    if (listener_paused_ && !closed_listener && now() >= listener_resume_at_) {
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.fd = listen_fd_;
      epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, listen_fd_, &ev);
      listener_paused_ = false;
    }
    const int n = epoll_wait(epoll_fd_, events.data(), static_cast<int>(events.size()), 100);
    for (int i = 0; i < n; ++i) {
      const int fd = events[i].data.fd;
      if (fd == wake_fd_) {
        uint64_t v;
        while (::read(wake_fd_, &v, sizeof(v)) > 0) {
        }
        continue;
      }
      if (fd == listen_fd_ && listen_fd_ >= 0) {
        accept_all();
        continue;
      }
      auto it = conns_.find(fd);
      if (it == conns_.end()) continue;
      if (it->second->state == Connection::State::kWrite) {
        if ((events[i].events & (EPOLLERR | EPOLLHUP)) != 0) {
          close_conn(fd);
        } else if ((events[i].events & EPOLLOUT) != 0) {
          flush(*it->second);
        }
        continue;
      }
      on_readable(*it->second);
    }
    reap_returned();
    check_deadlines();
  }
}

void Server::accept_all() {
  for (int k = 0; k < 64; ++k) {
    sockaddr_storage ss{};
    socklen_t len = sizeof(ss);
    const int fd = ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&ss), &len,
                             SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        // Out of descriptors: make room, and stop polling the listener for a moment so the
        // reactor does not spin on it.
        GEM_LOG_WARN("http: accept: %s (%d connections open)", std::strerror(errno),
                     static_cast<int>(conns_.size()));
        evict_one();
        epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, listen_fd_, nullptr);
        listener_paused_ = true;
        listener_resume_at_ = now() + 0.1;
      }
      return;
    }
    if (static_cast<int>(conns_.size()) >= options_.max_connections) evict_one();
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    auto c = std::make_unique<Connection>();
    c->fd = fd;
    c->remote = address_of(ss);
    c->since = now();
    c->state = Connection::State::kIdle;
    // A new connection must deliver its headers within the header deadline.
    c->deadline = c->since + options_.header_timeout_s;
    add_to_poll(*c);
    conns_[fd] = std::move(c);
    n_connections_.store(static_cast<int>(conns_.size()));
  }
}

void Server::evict_one() {
  // The oldest connection that no worker is answering.
  int victim = -1;
  double oldest = 0;
  for (auto& [fd, c] : conns_) {
    if (c->state == Connection::State::kBusy) continue;
    if (victim < 0 || c->since < oldest) {
      victim = fd;
      oldest = c->since;
    }
  }
  if (victim >= 0) {
    GEM_LOG_WARN("http: %s: closed to make room (more than %d connections)",
                 conns_[victim]->remote.c_str(), options_.max_connections);
    close_conn(victim);
  }
}

void Server::close_conn(int fd) {
  auto it = conns_.find(fd);
  if (it == conns_.end()) return;
  if (it->second->state != Connection::State::kBusy) epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
  ::close(fd);
  conns_.erase(it);
  n_connections_.store(static_cast<int>(conns_.size()));
}

void Server::on_readable(Connection& c) {
  char buf[65536];
  const int fd = c.fd;
  const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
  if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
    // Closed (or reset) by the client. Half a request is dropped without an answer.
    close_conn(fd);
    return;
  }
  if (n < 0) return;
  if (c.state == Connection::State::kLinger) {
    c.lingered += static_cast<size_t>(n);
    if (c.lingered > (4u << 20)) close_conn(fd);
    return;
  }
  c.in.append(buf, static_cast<size_t>(n));
  advance(c);
}

void Server::advance(Connection& c) {
  if (c.state == Connection::State::kIdle) {
    // Stray line breaks between requests are allowed (RFC 9112 §2.2).
    size_t k = 0;
    while (k < c.in.size() && (c.in[k] == '\r' || c.in[k] == '\n')) ++k;
    c.in.erase(0, k);
    if (c.in.empty()) return;
    c.state = Connection::State::kHead;
    // A new connection's header deadline runs from accept (a first byte sent just before it
    // buys no extra time); on a kept-alive connection it runs from the next request's first byte.
    if (c.n_requests > 0) c.deadline = now() + options_.header_timeout_s;
    c.req = std::make_unique<Request>();
    c.req->remote = c.remote;
    c.head_end = c.scanned = c.content_length = c.chunk_pos = 0;
    c.chunked = false;
  }
  int status = 0;
  std::string message;
  const Parse p = parse(c, &status, &message);
  if (p == Parse::kNeedMore) return;
  if (p == Parse::kError) {
    fail(c, status, message);
    return;
  }
  // Complete: hand it to a worker. The connection leaves the poll set until the answer is done;
  // whatever the client pipelines meanwhile waits in the socket or in `in`.
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, c.fd, nullptr);
  c.state = Connection::State::kBusy;
  ++c.n_requests;
  n_active_.fetch_add(1);
  {
    std::lock_guard<std::mutex> lock(mu_);
    tasks_.push_back(Task{&c, std::move(c.req)});
  }
  tasks_cv_.notify_one();
}

Server::Parse Server::parse(Connection& c, int* status, std::string* message) {
  Request& r = *c.req;
  if (c.state == Connection::State::kHead) {
    // Find the blank line that ends the head ("\r\n\r\n", or "\n\n" from lenient clients).
    size_t end = std::string::npos;
    size_t body_start = 0;
    for (size_t i = c.scanned; i < c.in.size(); ++i) {
      if (c.in[i] != '\n') continue;
      if (i >= 1 && c.in[i - 1] == '\n') {
        end = i - 1;
        body_start = i + 1;
        break;
      }
      if (i >= 2 && c.in[i - 1] == '\r' && c.in[i - 2] == '\n') {
        end = i - 2;
        body_start = i + 1;
        break;
      }
    }
    if (end == std::string::npos) {
      c.scanned = c.in.size();
      if (c.in.size() > options_.max_header_bytes) {
        *status = 431;
        *message = strprintf("request line and headers exceed %zu bytes",
                             options_.max_header_bytes);
        return Parse::kError;
      }
      return Parse::kNeedMore;
    }
    if (body_start > options_.max_header_bytes) {
      *status = 431;
      *message = strprintf("request line and headers exceed %zu bytes", options_.max_header_bytes);
      return Parse::kError;
    }
    c.head_end = body_start;
    std::string_view head(c.in.data(), end + 1);
    // Request line.
    size_t eol = head.find('\n');
    std::string_view line = trim(head.substr(0, eol));
    const size_t sp1 = line.find(' ');
    const size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
    if (sp1 == std::string_view::npos || sp2 == std::string_view::npos || sp1 == 0 ||
        line.find(' ', sp2 + 1) != std::string_view::npos) {
      *status = 400;
      *message = "malformed request line: expected 'METHOD TARGET HTTP/1.1'";
      return Parse::kError;
    }
    r.method = std::string(line.substr(0, sp1));
    r.target = std::string(line.substr(sp1 + 1, sp2 - sp1 - 1));
    const std::string_view version = line.substr(sp2 + 1);
    if (version == "HTTP/1.1") {
      r.minor_version = 1;
    } else if (version == "HTTP/1.0") {
      r.minor_version = 0;
    } else {
      *status = version.rfind("HTTP/", 0) == 0 ? 505 : 400;
      *message = "unsupported protocol version '" + std::string(version.substr(0, 16)) +
                 "': expected HTTP/1.1 or HTTP/1.0";
      return Parse::kError;
    }
    for (char ch : r.method) {
      if (!std::isupper(static_cast<unsigned char>(ch))) {
        *status = 400;
        *message = "malformed request line: the method must be upper-case letters";
        return Parse::kError;
      }
    }
    if (r.target.empty() || (r.target[0] != '/' && r.target != "*")) {
      *status = 400;
      *message = "malformed request line: the target must start with '/'";
      return Parse::kError;
    }
    const size_t q = r.target.find('?');
    r.path = r.target.substr(0, q);
    if (q != std::string::npos) r.query = r.target.substr(q + 1);
    // Headers.
    size_t pos = eol + 1;
    while (pos < head.size()) {
      size_t e = head.find('\n', pos);
      if (e == std::string_view::npos) e = head.size();
      std::string_view h = head.substr(pos, e - pos);
      pos = e + 1;
      if (!h.empty() && h.back() == '\r') h.remove_suffix(1);
      if (h.empty()) continue;
      if (h[0] == ' ' || h[0] == '\t') {
        *status = 400;
        *message = "folded header lines are not accepted";
        return Parse::kError;
      }
      const size_t colon = h.find(':');
      if (colon == std::string_view::npos || colon == 0 ||
          h.substr(0, colon).find_first_of(" \t") != std::string_view::npos) {
        *status = 400;
        *message = "malformed header line (expected 'Name: value')";
        return Parse::kError;
      }
      if (static_cast<int>(r.headers.size()) >= options_.max_headers) {
        *status = 431;
        *message = strprintf("more than %d request headers", options_.max_headers);
        return Parse::kError;
      }
      r.headers.push_back(Header{lower(h.substr(0, colon)), std::string(trim(h.substr(colon + 1)))});
    }
    // Framing.
    const std::string* te = r.header("transfer-encoding");
    const std::string* cl = nullptr;
    for (const Header& hd : r.headers) {
      if (hd.name != "content-length") continue;
      if (cl != nullptr && *cl != hd.value) {
        *status = 400;
        *message = "conflicting Content-Length headers";
        return Parse::kError;
      }
      cl = &hd.value;
    }
    if (te != nullptr) {
      if (cl != nullptr) {
        *status = 400;
        *message = "both Transfer-Encoding and Content-Length given";
        return Parse::kError;
      }
      if (lower(*te) != "chunked") {
        *status = 501;
        *message = "Transfer-Encoding '" + te->substr(0, 32) + "' is not supported (only chunked)";
        return Parse::kError;
      }
      c.chunked = true;
      c.chunk_pos = c.head_end;
    } else if (cl != nullptr) {
      if (!parse_decimal(*cl, &c.content_length)) {
        *status = 400;
        *message = "Content-Length '" + cl->substr(0, 32) + "' is not a non-negative integer";
        return Parse::kError;
      }
      if (c.content_length > options_.max_body_bytes) {
        *status = 413;
        *message = strprintf("request body of %zu bytes exceeds the limit of %zu bytes "
                             "(--max-body)",
                             c.content_length, options_.max_body_bytes);
        return Parse::kError;
      }
    }
    const std::string* conn_hdr = r.header("connection");
    c.keep_alive = r.minor_version == 1 && (conn_hdr == nullptr || !has_token(*conn_hdr, "close"));
    c.state = Connection::State::kBody;
    c.deadline = now() + options_.body_timeout_s;
    const bool body_pending = c.chunked ? true : c.in.size() - c.head_end < c.content_length;
    const std::string* expect = r.header("expect");
    if (expect != nullptr && r.minor_version == 1 && body_pending) {
      if (lower(*expect) != "100-continue") {
        *status = 417;
        *message = "unsupported Expect header";
        return Parse::kError;
      }
      write_all(c.fd, "HTTP/1.1 100 Continue\r\n\r\n", 0.0);
    }
  }
  // Body.
  if (!c.chunked) {
    if (c.in.size() - c.head_end < c.content_length) return Parse::kNeedMore;
    r.body = c.in.substr(c.head_end, c.content_length);
    c.in.erase(0, c.head_end + c.content_length);
    return Parse::kComplete;
  }
  while (true) {
    const size_t eol = c.in.find('\n', c.chunk_pos);
    if (eol == std::string::npos) {
      if (c.in.size() - c.chunk_pos > 1024) {
        *status = 400;
        *message = "malformed chunked body: chunk size line too long";
        return Parse::kError;
      }
      return Parse::kNeedMore;
    }
    std::string_view size_line(c.in.data() + c.chunk_pos, eol - c.chunk_pos);
    size_line = trim(size_line.substr(0, size_line.find(';')));
    size_t size = 0;
    if (size_line.empty() || size_line.size() > 15) {
      *status = 400;
      *message = "malformed chunked body: bad chunk size";
      return Parse::kError;
    }
    for (char ch : size_line) {
      const int d = std::isdigit(static_cast<unsigned char>(ch)) ? ch - '0'
                    : (ch >= 'a' && ch <= 'f') ? ch - 'a' + 10
                    : (ch >= 'A' && ch <= 'F') ? ch - 'A' + 10 : -1;
      if (d < 0) {
        *status = 400;
        *message = "malformed chunked body: bad chunk size";
        return Parse::kError;
      }
      size = size * 16 + static_cast<size_t>(d);
    }
    if (size == 0) {
      // Trailer lines (ignored) up to a blank line.
      size_t p = eol + 1;
      while (true) {
        const size_t e = c.in.find('\n', p);
        if (e == std::string::npos) return Parse::kNeedMore;
        std::string_view t(c.in.data() + p, e - p);
        p = e + 1;
        if (t.empty() || t == "\r") break;
      }
      c.in.erase(0, p);
      return Parse::kComplete;
    }
    if (r.body.size() + size > options_.max_body_bytes) {
      *status = 413;
      *message = strprintf("chunked request body exceeds the limit of %zu bytes (--max-body)",
                           options_.max_body_bytes);
      return Parse::kError;
    }
    const size_t data = eol + 1;
    if (c.in.size() < data + size + 1) return Parse::kNeedMore;
    size_t after = data + size;
    if (c.in[after] == '\r') {
      if (c.in.size() < after + 2) return Parse::kNeedMore;
      ++after;
    }
    if (c.in[after] != '\n') {
      *status = 400;
      *message = "malformed chunked body: chunk data not followed by a line break";
      return Parse::kError;
    }
    r.body.append(c.in, data, size);
    c.chunk_pos = after + 1;
  }
}

void Server::fail(Connection& c, int status, const std::string& message) {
  const std::string method = c.req && !c.req->method.empty() ? c.req->method : "-";
  const std::string path = c.req && !c.req->path.empty() ? c.req->path : "-";
  GEM_LOG_WARN("http: %s %s %s -> %d: %s", c.remote.c_str(), method.c_str(), path.c_str(), status,
               message.c_str());
  const std::string body = error_body_ ? error_body_(status, message) : message;
  const std::string out = strprintf("HTTP/1.1 %d %s\r\nContent-Type: application/json; "
                                    "charset=utf-8\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n",
                                    status, reason_phrase(status), body.size()) + body;
  write_all(c.fd, out, 0.0);  // never blocks the reactor: a client that does not read loses it
  // Stop sending, then read and discard what the client still sends for a moment, so that the
  // answer is not lost to a reset while the client is still writing its body.
  ::shutdown(c.fd, SHUT_WR);
  c.state = Connection::State::kLinger;
  c.deadline = now() + 2.0;
  c.in.clear();
  c.in.shrink_to_fit();
  c.req.reset();
}

void Server::flush(Connection& c) {
  while (c.out_off < c.out.size()) {
    const ssize_t n = ::send(c.fd, c.out.data() + c.out_off, c.out.size() - c.out_off, MSG_NOSIGNAL);
    if (n > 0) {
      c.out_off += static_cast<size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      return;  // wait for EPOLLOUT
    } else {
      close_conn(c.fd);
      return;
    }
  }
  c.out.clear();
  c.out.shrink_to_fit();
  c.out_off = 0;
  if (!c.keep_after_out || stopping_.load()) {
    close_conn(c.fd);
    return;
  }
  c.state = Connection::State::kIdle;
  c.deadline = now() + options_.keep_alive_s;
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP;
  ev.data.fd = c.fd;
  epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, c.fd, &ev);
  if (!c.in.empty()) advance(c);  // a pipelined request is already here
}

void Server::check_deadlines() {
  const double t = now();
  std::vector<int> expired;
  for (auto& [fd, c] : conns_) {
    if (c->state != Connection::State::kBusy && t >= c->deadline) expired.push_back(fd);
  }
  for (int fd : expired) {
    Connection& c = *conns_[fd];
    switch (c.state) {
      case Connection::State::kHead:
        fail(c, 408, strprintf("the request headers did not arrive within %.0f s", options_.header_timeout_s));
        break;
      case Connection::State::kBody:
        fail(c, 408, strprintf("the request body did not arrive within %.0f s", options_.body_timeout_s));
        break;
      case Connection::State::kWrite:
        GEM_LOG_WARN("http: %s: did not take its answer within %.0f s; closed", c.remote.c_str(),
                     options_.write_timeout_s);
        close_conn(fd);
        break;
      default:  // idle (keep-alive or a silent new connection) or lingering: close quietly
        close_conn(fd);
        break;
    }
  }
}

void Server::worker() {
  while (true) {
    Task task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      tasks_cv_.wait(lock, [&] { return quit_ || !tasks_.empty(); });
      if (tasks_.empty()) return;  // quit_
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    Connection* conn = task.conn;
    bool keep = false;
    {
      Response res(this, conn, task.req.get());
      try {
        handler_(*task.req, res);
      } catch (const std::exception& e) {
        GEM_LOG_ERROR("http: %s %s %s: unexpected exception: %s", conn->remote.c_str(),
                      task.req->method.c_str(), task.req->path.c_str(), e.what());
        if (!res.started()) {
          res.send(500, "application/json; charset=utf-8",
                   error_body_ ? error_body_(500, std::string("internal error: ") + e.what()) : "");
        } else {
          res.drop();
        }
      }
      if (!res.started()) {
        res.drop();  // the handler decided not to answer (the client is gone)
      } else if (!res.failed()) {
        res.end_stream();  // a stream the handler left open ends here (no-op otherwise)
      }
      keep = conn->keep_alive && !res.failed() && !stopping_.load();
    }
    finish_task(conn, keep);
  }
}

void Server::finish_task(Connection* conn, bool keep) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    returned_.emplace_back(conn, keep);
  }
  n_active_.fetch_sub(1);
  wake();
}

void Server::reap_returned() {
  std::vector<std::pair<Connection*, bool>> back;
  {
    std::lock_guard<std::mutex> lock(mu_);
    back.swap(returned_);
  }
  for (auto& [conn, keep] : back) {
    const int fd = conn->fd;
    if (!conn->out.empty()) {
      // The client has not taken the whole answer yet: the reactor delivers the rest, then
      // reads the next request (or closes).
      conn->state = Connection::State::kWrite;
      conn->keep_after_out = keep && !stopping_.load();
      conn->deadline = now() + options_.write_timeout_s;
      epoll_event ev{};
      ev.events = EPOLLOUT;
      ev.data.fd = fd;
      epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev);
      continue;
    }
    if (!keep || stopping_.load()) {
      // Not in the poll set (kBusy): close directly.
      ::close(fd);
      conns_.erase(fd);
      n_connections_.store(static_cast<int>(conns_.size()));
      continue;
    }
    conn->state = Connection::State::kIdle;
    conn->deadline = now() + options_.keep_alive_s;
    add_to_poll(*conn);
    if (!conn->in.empty()) advance(*conn);  // a pipelined request is already here
  }
}

// ---------------------------------------------------------------------------------------------

bool is_loopback_host(std::string_view host) {
  if (host == "localhost" || host == "::1" || host == "[::1]") return true;
  in_addr a{};
  const std::string h(host);
  if (inet_pton(AF_INET, h.c_str(), &a) == 1) return (ntohl(a.s_addr) >> 24) == 127;
  return false;
}

bool is_loopback_host_header(std::string_view host) {
  std::string h = lower(trim(host));
  if (h.empty()) return false;
  if (h[0] == '[') {
    const size_t close = h.find(']');
    if (close == std::string::npos) return false;
    const std::string rest = h.substr(close + 1);
    if (!rest.empty() && rest[0] != ':') return false;
    return h.substr(1, close - 1) == "::1";
  }
  const size_t colon = h.find(':');
  if (colon != std::string::npos) {
    for (size_t i = colon + 1; i < h.size(); ++i) {
      if (!std::isdigit(static_cast<unsigned char>(h[i]))) return false;
    }
    h.resize(colon);
  }
  if (!h.empty() && h.back() == '.') h.pop_back();  // "localhost." is the same name
  if (h == "localhost") return true;
  if (h.size() > 10 && h.compare(h.size() - 10, 10, ".localhost") == 0) return true;  // RFC 6761
  in_addr a{};
  if (inet_pton(AF_INET, h.c_str(), &a) == 1) return (ntohl(a.s_addr) >> 24) == 127;
  return false;
}

}  // namespace gem::server::http
