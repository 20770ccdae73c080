// Package serve is the rollout service that external trainers (slime,
// docs/design.md §7) call: one HTTP request plays one CompactionRL episode with
// the agent loop against the trainer's own inference engine and answers
// with the episode's segments, token-exact, in slime's layout.
//
// Data flow: POST /v1/rollouts → decodeRequest and Validate (400 with a
// JSON error naming the field) → admission (at most MaxInFlight episodes
// run, at most MaxQueue wait for a slot; past that 429 with Retry-After) →
// Factory.Runner builds (or reuses) the agent loop for the named engine
// and budget, Factory.Env the task's environment → rollout.Run plays the
// one episode (panic recovery, the per-episode deadline, infra masking) →
// the environment is closed (its sandbox torn down) → NewResponse lays the
// segments out as tokens = prompt ⊕ response with loss_mask and
// rollout_log_probs over the response. The request's context is the
// episode's: a client that disconnects cancels the episode, and the
// closed environment frees its sandbox. Serve drains on shutdown: the
// listener closes, requests on open connections get 503, in-flight and
// queued episodes finish, then Serve returns.
//
// GET /v1/tasks lists the task ids a request may name (TaskLister: every
// loaded task, or ?split=NAME&count=N seeds of a generated suite), from
// which the trainers' dataset tools make their rows.
// GET /healthz answers 200 "ok" (503 "draining" once shutdown began);
// GET /metrics is the Prometheus text format (see Metrics).
//
// Who may use it: with Config.APIKey set, every request but /healthz
// carries "Authorization: Bearer KEY" or gets 401 (before its body is
// read); a request whose engine.url is outside Config.EngineAllow
// (default: loopback) gets 403 before anything is built, so that the
// service cannot be made to call arbitrary addresses on a client's
// behalf. Config.TLSCertFile/TLSKeyFile serve HTTPS.
package serve

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/compactrl/compactrl/agent"
	"github.com/compactrl/compactrl/episode"
	"github.com/compactrl/compactrl/infer/remote"
	"github.com/compactrl/compactrl/internal/field"
	"github.com/compactrl/compactrl/netallow"
	"github.com/compactrl/compactrl/rollout"
)

// Factory builds what an episode needs. Implementations must be safe for
// concurrent use.
type Factory interface {
	// Runner returns the agent loop sampling from e with configuration cfg
	// (it may cache by e and cfg). An error is the request's fault (a bad
	// engine or budget) and is answered 400 naming field.
	Runner(ctx context.Context, e Engine, cfg agent.Config) (r rollout.Runner, field string, err error)
	// HasTask reports whether task id is known.
	HasTask(id string) bool
	// Env builds a fresh environment of task id for one episode. If it
	// implements io.Closer, Close is called when the episode ends, however
	// it ends.
	Env(id string, seed int64) (agent.Environment, error)
}

// TaskLister is a Factory that can say which task ids it plays (GET
// /v1/tasks, from which the trainers' dataset tools make their rows).
type TaskLister interface {
	// TaskIDs returns the task ids: every one of a finite task set, or
	// for a generated suite the first count of its seed range split
	// (both required then). An error is the request's fault (400).
	TaskIDs(split string, count int) ([]string, error)
}

// TasksResponse is the body of GET /v1/tasks.
type TasksResponse struct {
	TaskIDs []string `json:"task_ids"`
}

// Config configures a Server.
type Config struct {
	MaxInFlight    int           // episodes played at once (≥ 1)
	MaxQueue       int           // requests waiting for a slot (≥ 0); past it 429
	EpisodeTimeout time.Duration // one episode's deadline (0: none); past it infra_error
	RetryAfter     time.Duration // the 429's Retry-After hint (rounded up to seconds; default 1s)

	// Connection limits (0: the default named). A client that sends its
	// headers or body too slowly, or keeps a connection idle, loses it, so
	// that slow or hostile clients cannot hold the server's connections
	// and file descriptors.
	ReadHeaderTimeout time.Duration // reading a request's headers (DefaultReadHeaderTimeout)
	BodyTimeout       time.Duration // reading a request's body once its headers are in (DefaultBodyTimeout); past it 408
	IdleTimeout       time.Duration // a keep-alive connection waiting for its next request (DefaultIdleTimeout)
	WriteTimeout      time.Duration // writing one answer once it is ready (DefaultWriteTimeout)
	MaxBodyBytes      int64         // a request body's size (DefaultMaxBodyBytes); past it 413
	// MaxConns caps the connections open at once (default MaxInFlight +
	// MaxQueue + ConnHeadroom, so that every admissible request and a few
	// health checks and 429s fit). Past it new connections wait in the
	// kernel's accept queue until one closes.
	MaxConns int

	// Agent holds the defaults of the request's sampling and agent fields.
	Agent agent.Config

	// APIKey, when set, is the bearer token every request but GET /healthz
	// must carry (Authorization: Bearer KEY); others get 401. It is
	// compared in constant time.
	APIKey string
	// EngineAllow lists the engine addresses a request may name (nil:
	// netallow.Loopback()); a request naming any other gets 403 before
	// anything is built. The Factory must dial through the same list
	// (EngineAllow.Client) so that resolution and redirects are checked
	// too.
	EngineAllow *netallow.List
	// Resolver resolves engine host names for the allowlist check (nil:
	// net.DefaultResolver).
	Resolver netallow.Resolver
	// TLSCertFile and TLSKeyFile, both set, make Serve answer HTTPS with
	// that certificate (PEM); both empty, plain HTTP.
	TLSCertFile, TLSKeyFile string
}

// Defaults of Config's connection limits.
const (
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultBodyTimeout       = 30 * time.Second
	DefaultIdleTimeout       = 120 * time.Second
	DefaultWriteTimeout      = 60 * time.Second
	DefaultMaxBodyBytes      = 1 << 20
	// ConnHeadroom is MaxConns' room beyond the admissible requests.
	ConnHeadroom = 64
)

// Server is the rollout service's HTTP handler.
type Server struct {
	cfg     Config
	f       Factory
	m       *Metrics
	slots   chan struct{}
	mux     *http.ServeMux
	mu      sync.Mutex
	waiting int
	drain   atomic.Bool
	key     [sha256.Size]byte // SHA-256 of Config.APIKey (zero: no key)
}

// MinAPIKeyLen is the shortest API key New accepts.
const MinAPIKeyLen = 16

// authorized wraps h: with an API key set, a request without
// "Authorization: Bearer KEY" gets 401. Both sides are hashed first, so
// the comparison takes the same time whatever the key's length and the
// bytes that match.
func (s *Server) authorized(h http.HandlerFunc) http.HandlerFunc {
	if s.cfg.APIKey == "" {
		return h
	}
	return func(w http.ResponseWriter, r *http.Request) {
		token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		got := sha256.Sum256([]byte(token))
		if !ok || subtle.ConstantTimeCompare(got[:], s.key[:]) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="compactrl serve"`)
			s.reject(w, http.StatusUnauthorized, "unauthorized", ErrorBody{Error: "missing or wrong API key: send Authorization: Bearer KEY"})
			return
		}
		h(w, r)
	}
}

// New returns a Server over f.
func New(cfg Config, f Factory) (*Server, error) {
	if cfg.MaxInFlight < 1 {
		return nil, fmt.Errorf("serve: max in-flight episodes %d must be ≥ 1", cfg.MaxInFlight)
	}
	if cfg.MaxQueue < 0 {
		return nil, fmt.Errorf("serve: queue %d must be ≥ 0", cfg.MaxQueue)
	}
	if cfg.EpisodeTimeout < 0 {
		return nil, fmt.Errorf("serve: episode timeout %v must be ≥ 0", cfg.EpisodeTimeout)
	}
	if f == nil {
		return nil, errors.New("serve: factory is required")
	}
	if cfg.RetryAfter <= 0 {
		cfg.RetryAfter = time.Second
	}
	for _, d := range []struct {
		name string
		v    *time.Duration
		def  time.Duration
	}{
		{"read-header timeout", &cfg.ReadHeaderTimeout, DefaultReadHeaderTimeout}, {"body timeout", &cfg.BodyTimeout, DefaultBodyTimeout},
		{"idle timeout", &cfg.IdleTimeout, DefaultIdleTimeout}, {"write timeout", &cfg.WriteTimeout, DefaultWriteTimeout},
	} {
		switch {
		case *d.v < 0:
			return nil, fmt.Errorf("serve: %s %v must be ≥ 0 (0: %v)", d.name, *d.v, d.def)
		case *d.v == 0:
			*d.v = d.def
		}
	}
	switch {
	case cfg.MaxBodyBytes < 0:
		return nil, fmt.Errorf("serve: max body %d bytes must be ≥ 0 (0: %d)", cfg.MaxBodyBytes, DefaultMaxBodyBytes)
	case cfg.MaxBodyBytes == 0:
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	switch {
	case cfg.MaxConns < 0:
		return nil, fmt.Errorf("serve: max connections %d must be ≥ 0 (0: in-flight + queue + %d)", cfg.MaxConns, ConnHeadroom)
	case cfg.MaxConns == 0:
		cfg.MaxConns = cfg.MaxInFlight + cfg.MaxQueue + ConnHeadroom
	}
	if cfg.APIKey != "" && len(cfg.APIKey) < MinAPIKeyLen {
		return nil, fmt.Errorf("serve: API key of %d bytes: want at least %d (e.g. openssl rand -hex 32)", len(cfg.APIKey), MinAPIKeyLen)
	}
	if (cfg.TLSCertFile == "") != (cfg.TLSKeyFile == "") {
		return nil, errors.New("serve: a TLS certificate needs its key and a key its certificate")
	}
	if cfg.TLSCertFile != "" {
		if _, err := tls.LoadX509KeyPair(cfg.TLSCertFile, cfg.TLSKeyFile); err != nil {
			return nil, fmt.Errorf("serve: TLS certificate %s / key %s: %w", cfg.TLSCertFile, cfg.TLSKeyFile, err)
		}
	}
	if cfg.EngineAllow == nil {
		cfg.EngineAllow = netallow.Loopback()
	}
	if cfg.Resolver == nil {
		cfg.Resolver = net.DefaultResolver
	}
	s := &Server{cfg: cfg, f: f, m: newMetrics(), slots: make(chan struct{}, cfg.MaxInFlight), mux: http.NewServeMux()}
	if cfg.APIKey != "" {
		s.key = sha256.Sum256([]byte(cfg.APIKey))
	}
	s.mux.HandleFunc("POST /v1/rollouts", s.authorized(s.rollouts))
	s.mux.HandleFunc("GET /v1/tasks", s.authorized(s.tasks))
	s.mux.HandleFunc("GET /healthz", s.healthz)
	s.mux.HandleFunc("GET /metrics", s.authorized(s.metrics))
	return s, nil
}

// Metrics returns the server's metrics (for a Factory that records engine
// latency).
func (s *Server) Metrics() *Metrics { return s.m }

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// Drain makes the server refuse new episodes (503); in-flight and queued
// ones continue. Serve calls it when its context ends.
func (s *Server) Drain() { s.drain.Store(true) }

// answer writes one JSON answer within the write timeout (a client that
// does not read it loses the connection instead of holding it).
func (s *Server) answer(w http.ResponseWriter, code int, v any) {
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(s.cfg.WriteTimeout))
	writeJSON(w, code, v)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v) // the client may be gone; nothing to do about it
}

func (s *Server) reject(w http.ResponseWriter, code int, reason string, body ErrorBody) {
	s.m.rejected(reason)
	if code == http.StatusTooManyRequests || code == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", strconv.Itoa(int((s.cfg.RetryAfter+time.Second-1)/time.Second)))
	}
	if code == http.StatusServiceUnavailable || code == http.StatusRequestEntityTooLarge || code == http.StatusRequestTimeout {
		w.Header().Set("Connection", "close")
	}
	s.answer(w, code, body)
}

func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if s.drain.Load() {
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, "draining\n")
		return
	}
	io.WriteString(w, "ok\n")
}

func (s *Server) metrics(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	s.m.WriteText(w)
}

// tasks answers GET /v1/tasks[?split=NAME&count=N] with the factory's task
// ids (TaskLister); 404 when the factory cannot list them.
func (s *Server) tasks(w http.ResponseWriter, r *http.Request) {
	l, ok := s.f.(TaskLister)
	if !ok {
		s.reject(w, http.StatusNotFound, "no_task_list", ErrorBody{Error: "this service cannot list its tasks"})
		return
	}
	q := r.URL.Query()
	count := 0
	if c := q.Get("count"); c != "" {
		n, err := strconv.Atoi(c)
		if err != nil || n < 1 {
			s.reject(w, http.StatusBadRequest, "bad_request", ErrorBody{Error: fmt.Sprintf("count %q: want a positive integer", c), Field: "count"})
			return
		}
		count = n
	}
	ids, err := l.TaskIDs(q.Get("split"), count)
	if err != nil {
		s.reject(w, http.StatusBadRequest, "bad_request", ErrorBody{Error: err.Error()})
		return
	}
	s.answer(w, http.StatusOK, TasksResponse{TaskIDs: ids})
}

// admit reserves a place (running or waiting); false when the queue is full.
func (s *Server) admit() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.slots)+s.waiting >= s.cfg.MaxInFlight+s.cfg.MaxQueue {
		return false
	}
	s.waiting++
	s.m.queued.Add(1)
	return true
}

func (s *Server) unqueue() {
	s.mu.Lock()
	s.waiting--
	s.mu.Unlock()
	s.m.queued.Add(-1)
}

func (s *Server) rollouts(w http.ResponseWriter, r *http.Request) {
	if s.drain.Load() {
		s.reject(w, http.StatusServiceUnavailable, "draining", ErrorBody{Error: "server is draining (shutting down); send the rollout to another instance"})
		return
	}
	b, ok := s.readBody(w, r)
	if !ok {
		return
	}
	req, err := decodeRequest(b)
	if err == nil {
		err = req.Validate()
	}
	if err == nil && !s.f.HasTask(req.TaskID) {
		err = field.Errorf("task_id", "unknown task %q", req.TaskID)
	}
	if err == nil {
		if err = s.checkEngine(r.Context(), req.Engine); err != nil {
			s.reject(w, http.StatusForbidden, "engine_not_allowed", ErrorBody{Error: err.Error(), Field: "engine.url"})
			return
		}
	}
	var runner rollout.Runner
	if err == nil {
		var cfg agent.Config
		if cfg, err = req.AgentConfig(s.cfg.Agent); err == nil {
			var path string
			if runner, path, err = s.f.Runner(r.Context(), req.Engine, cfg); err != nil {
				err = &field.Error{Path: path, Msg: err.Error()}
			}
		}
	}
	if err != nil {
		var fe *field.Error
		if !errors.As(err, &fe) {
			fe = &field.Error{Msg: err.Error()}
		}
		s.reject(w, http.StatusBadRequest, "bad_request", ErrorBody{Error: fe.Error(), Field: fe.Path})
		return
	}

	if !s.admit() {
		s.reject(w, http.StatusTooManyRequests, "queue_full", ErrorBody{Error: fmt.Sprintf("%d episodes running and %d queued: retry later", s.cfg.MaxInFlight, s.cfg.MaxQueue)})
		return
	}
	select {
	case s.slots <- struct{}{}:
		s.unqueue()
	case <-r.Context().Done():
		s.unqueue()
		s.m.finished("cancelled")
		return
	}
	defer func() { <-s.slots }()

	ctx := r.Context()
	if req.RoutingKey != "" {
		ctx = remote.WithHeader(ctx, RoutingHeader, req.RoutingKey)
	}
	ep, err := s.play(ctx, &req, runner)
	if err != nil {
		s.m.finished("cancelled")
		return // the client is gone
	}
	s.m.finished(string(ep.Status))
	s.m.compactions.Add(int64(ep.Metrics[agent.MetricCompactions]))
	s.m.turns.Add(int64(ep.Metrics[agent.MetricTurns]))
	s.answer(w, http.StatusOK, NewResponse(*req.RolloutID, req.TaskID, &ep))
}

// checkEngine checks the request's engine URL against Config.EngineAllow.
func (s *Server) checkEngine(ctx context.Context, e Engine) error {
	return s.cfg.EngineAllow.CheckURL(ctx, s.cfg.Resolver, e.URL)
}

// readBody reads the request body within BodyTimeout and MaxBodyBytes; past
// them it answers 408 or 413 (and the connection closes). The read
// deadline is lifted once the body is in: the episode may run far longer,
// and the server's background read then only watches for the client
// going away.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(s.cfg.BodyTimeout))
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	var tooLarge *http.MaxBytesError
	var ne net.Error
	switch {
	case err == nil:
		_ = rc.SetReadDeadline(time.Time{})
		return b, true
	case errors.As(err, &tooLarge):
		s.reject(w, http.StatusRequestEntityTooLarge, "body_too_large", ErrorBody{Error: fmt.Sprintf("request body larger than %d bytes", s.cfg.MaxBodyBytes)})
	case errors.As(err, &ne) && ne.Timeout():
		s.reject(w, http.StatusRequestTimeout, "body_timeout", ErrorBody{Error: fmt.Sprintf("request body not received within %v", s.cfg.BodyTimeout)})
	default:
		s.reject(w, http.StatusBadRequest, "bad_request", ErrorBody{Error: fmt.Sprintf("read body: %v", err)})
	}
	return nil, false
}

// play runs one episode through the rollout pool with one worker; the
// error is non-nil only when ctx ended (the episode was dropped).
func (s *Server) play(ctx context.Context, req *Request, runner rollout.Runner) (episode.Episode, error) {
	s.m.inFlight.Add(1)
	defer s.m.inFlight.Add(-1)
	id := strconv.FormatInt(*req.RolloutID, 10)
	job := rollout.Job{Seed: req.Seed(), ID: id, Group: req.TaskID}
	envs := func(seed int64) (agent.Environment, error) { return s.f.Env(req.TaskID, seed) }
	var sink oneSink
	_, err := rollout.Run(ctx, rollout.Config{Workers: 1, EpisodeTimeout: s.cfg.EpisodeTimeout},
		[]rollout.Job{job}, closing{runner, s.m}, envs, &sink, nil)
	if err != nil && sink.ep == nil {
		return episode.Episode{}, err
	}
	if sink.ep == nil {
		return episode.Episode{}, errors.New("serve: episode was not played")
	}
	return *sink.ep, nil
}

type oneSink struct{ ep *episode.Episode }

func (o *oneSink) Write(ep *episode.Episode) error {
	o.ep = ep
	return nil
}

// closing closes the environment when its episode ends, however it ends,
// so that its sandbox and workspace never outlive the episode (the
// environment's Close tears them down).
type closing struct {
	r rollout.Runner
	m *Metrics
}

func (c closing) Run(ctx context.Context, env agent.Environment, seed int64) (episode.Episode, error) {
	cl, ok := env.(io.Closer)
	if ok {
		c.m.sandboxes.Add(1)
		defer func() {
			cl.Close()
			c.m.sandboxes.Add(-1)
		}()
	}
	return c.r.Run(ctx, env, seed)
}

// httpServer is the http.Server Serve runs: headers within
// ReadHeaderTimeout, a whole request within ReadHeaderTimeout + BodyTimeout
// (a backstop: the rollout handler sets and lifts its own body deadline),
// idle connections closed after IdleTimeout. There is no server-wide write
// timeout, as an episode's answer may take hours; each answer gets
// WriteTimeout once it is ready.
func (s *Server) httpServer() *http.Server {
	return &http.Server{Handler: s, ReadHeaderTimeout: s.cfg.ReadHeaderTimeout,
		ReadTimeout: s.cfg.ReadHeaderTimeout + s.cfg.BodyTimeout, IdleTimeout: s.cfg.IdleTimeout}
}

// Serve answers on ln, with at most MaxConns connections open at once,
// until ctx ends, then drains: new connections are
// refused, requests on open connections get 503, and Serve waits up to
// drainTimeout (0: without limit) for the episodes in flight and in the
// queue to finish and be answered. Past drainTimeout the remaining
// episodes are cancelled (their sandboxes torn down). The error is nil
// after a clean drain.
func (s *Server) Serve(ctx context.Context, ln net.Listener, drainTimeout time.Duration) error {
	hs := s.httpServer()
	ln = limitConns(ln, s.cfg.MaxConns)
	errc := make(chan error, 1)
	go func() {
		if s.cfg.TLSCertFile != "" {
			errc <- hs.ServeTLS(ln, s.cfg.TLSCertFile, s.cfg.TLSKeyFile)
			return
		}
		errc <- hs.Serve(ln)
	}()
	select {
	case err := <-errc:
		return fmt.Errorf("serve %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	s.Drain()
	sctx := context.Background()
	if drainTimeout > 0 {
		var cancel context.CancelFunc
		sctx, cancel = context.WithTimeout(sctx, drainTimeout)
		defer cancel()
	}
	err := hs.Shutdown(sctx)
	if err != nil {
		hs.Close() // cancels the remaining requests' contexts: their episodes stop
		return fmt.Errorf("serve: drain after %v: %w", drainTimeout, err)
	}
	return nil
}
