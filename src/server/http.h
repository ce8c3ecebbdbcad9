// gem's HTTP/1.1 layer: an event-driven front and a worker pool.
//
// One reactor thread (epoll) accepts connections and reads requests: the request line, the
// headers and the whole body (Content-Length or chunked), each under a deadline. Only a complete
// request is handed to a worker, so a connection that is idle, slow or stalled costs a buffer
// and a table entry, never a thread: 256 stalled connections leave every worker free. A worker
// runs the handler and writes the answer itself (blocking on the socket with a write deadline),
// which keeps SSE streaming and disconnect polling simple; then the connection goes back to the
// reactor for its next (possibly already pipelined) request, so pipelined requests are answered
// in order, one at a time. A whole (non-streamed) answer that the socket does not take at once is
// finished by the reactor, so a client that pipelines and never reads holds no worker either.
//
// Why not cpp-httplib 0.11 (Debian's): it is thread-per-connection with a fixed pool, so 17 slow
// senders stall every route, and it offers no header or body deadline besides the socket
// timeout. Why not Boost.Beast: not installed here (libboost-dev), and its async model would have
// to be bridged to the engine's blocking, token-by-token callbacks anyway; the part that must be
// event-driven (reading requests under deadlines) is small. See bench/RESULTS.md (server).
//
// Limits, all enforced before a worker sees the request: header block size and count, the
// Content-Length syntax and --max-body (413 at once, before any body byte is read), header and
// body deadlines (408), an idle keep-alive limit, a cap on open connections (the oldest
// connection that is not being served makes room). HTTP/1.0 requests are answered and the
// connection closed; streams to them are close-delimited instead of chunked.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "base/status.h"

namespace gem::server::http {

struct Header {
  std::string name;  // lower case
  std::string value;
};

struct Request {
  std::string method;
  std::string target;  // as sent
  std::string path;    // target without the query
  std::string query;
  int minor_version = 1;  // HTTP/1.<minor>
  std::vector<Header> headers;
  std::string body;
  std::string remote;  // "address:port" of the client, for logs
  // The first header named `lower_name` (lower case), or nullptr.
  const std::string* header(std::string_view lower_name) const;
  std::string header_value(std::string_view lower_name) const;
};

struct Options {
  std::string host = "127.0.0.1";
  int port = 8080;  // 0: any free port
  int backlog = 1024;
  size_t max_body_bytes = 16u << 20;
  size_t max_header_bytes = 64u << 10;
  int max_headers = 100;
  double header_timeout_s = 10;   // from a connection's first byte (or accept) to the blank line
  double body_timeout_s = 60;     // from the end of the headers to the last body byte
  double keep_alive_s = 5;        // idle time allowed between requests on one connection
  double write_timeout_s = 600;   // longest wait for the client to take response bytes
  int n_workers = 17;
  int max_connections = 1024;
};

struct Connection;
class Server;

// The answer to one request, written by the worker that runs the handler.
class Response {
 public:
  Response(Server* server, Connection* conn, const Request* req);
  ~Response();
  Response(const Response&) = delete;
  Response& operator=(const Response&) = delete;

  // Added to whatever answer is sent (CORS headers, Retry-After).
  void add_header(std::string name, std::string value);
  // A short reason logged with a 4xx/5xx answer (never the body or a key).
  void set_log_note(std::string note) { note_ = std::move(note); }
  // A whole answer with Content-Length.
  void send(int status, std::string_view content_type, std::string_view body);
  // A streamed answer: chunked for HTTP/1.1, close-delimited for HTTP/1.0.
  bool start_stream(int status, std::string_view content_type);
  bool write(std::string_view data);  // false once the client is gone or too slow
  bool end_stream();
  // Closes the connection with no (further) answer: the client went away.
  void drop();

  bool started() const { return started_; }
  bool failed() const { return failed_; }
  int status() const { return status_; }
  int fd() const;

 private:
  bool write_raw(std::string_view data);
  std::string head(int status, std::string_view content_type, const std::string& framing);
  void log_status();

  Server* server_;
  Connection* conn_;
  const Request* req_;
  std::vector<Header> extra_;
  std::string note_;
  int status_ = 0;
  bool started_ = false;
  bool streaming_ = false;
  bool finished_ = false;
  bool failed_ = false;
};

using Handler = std::function<void(const Request&, Response&)>;
// The body of an error answer the HTTP layer makes itself (400, 408, 413, 431, 501, 505).
using ErrorBody = std::function<std::string(int status, const std::string& message)>;

class Server {
 public:
  Server(Options options, Handler handler, ErrorBody error_body);
  ~Server();

  // Creates, binds and listens on the socket (no SO_REUSEPORT: a busy port is an error).
  Status bind();
  int port() const { return port_; }
  // Runs the reactor in the calling thread until stop().
  void run();
  // Closes the listening socket and every connection that is not being answered; answers in
  // progress finish and then close their connection. Safe from any thread.
  void stop_accepting();
  // Ends run(): waits for the workers' current handlers (the caller makes them finish), then
  // closes every connection. Safe from any thread.
  void stop();

  int n_active() const { return n_active_.load(); }        // requests in handlers
  int n_connections() const { return n_connections_.load(); }
  bool accepting() const { return !stopping_.load(); }
  const Options& options() const { return options_; }

 private:
  friend class Response;
  struct Task {
    Connection* conn;
    std::unique_ptr<Request> req;
  };
  enum class Parse { kNeedMore, kComplete, kError };

  void loop();
  void accept_all();
  void on_readable(Connection& c);
  void advance(Connection& c);  // parse what is buffered; dispatch or answer an error
  Parse parse(Connection& c, int* status, std::string* message);
  void fail(Connection& c, int status, const std::string& message);
  void close_conn(int fd);
  void flush(Connection& c);  // sends the rest of a deferred answer
  void reap_returned();
  void check_deadlines();
  void evict_one();
  void worker();
  void finish_task(Connection* conn, bool keep);
  void wake();
  void add_to_poll(Connection& c);

  Options options_;
  Handler handler_;
  ErrorBody error_body_;
  int listen_fd_ = -1;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;
  int port_ = 0;
  std::unordered_map<int, std::unique_ptr<Connection>> conns_;  // reactor thread only
  bool listener_paused_ = false;
  double listener_resume_at_ = 0;

  std::mutex mu_;  // guards tasks_, returned_, quit_
  std::condition_variable tasks_cv_;
  std::deque<Task> tasks_;
  std::vector<std::pair<Connection*, bool>> returned_;  // (connection, keep alive)
  bool quit_ = false;
  std::vector<std::thread> workers_;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> stop_requested_{false};
  std::atomic<int> n_active_{0};
  std::atomic<int> n_connections_{0};
};

// The listen address as a client may write it in a URL ("127.0.0.1", "[::1]").
bool is_loopback_host(std::string_view host);
// Whether `host_header` ("localhost:8080", "127.0.0.1", "[::1]:80", "a.localhost") names a
// loopback host: the DNS-rebinding check for a server bound to loopback.
bool is_loopback_host_header(std::string_view host_header);

}  // namespace gem::server::http
