package wire

// The agent's Unix socket (`sluice agent --listen-unix`): the same HTTP
// API as its TCP listener, for a trainer on the same node, with each
// batch's body handed over as a memfd instead of copied through a socket.
// The trainer maps the batch where the agent wrote it: its process pays
// neither the copy nor the TCP stack (internal/fdhttp serves it; the
// Python client speaks it for a unix:// URL).
//
// On one connection, one request at a time:
//
//   - request: a 4-byte big-endian length, then that many bytes holding
//     one HTTP/1.1 request (request line, headers, and a body of its
//     Content-Length), at most AgentSocketMaxRequest bytes;
//   - response: a 4-byte big-endian length, then that many bytes of
//     AgentSocketHead as JSON (at most AgentSocketMaxHead), then, when
//     the head's FD is false, Length bytes of body (at most
//     AgentSocketMaxInline). Otherwise the body is the first Length bytes
//     of a memfd: the file passed with the response's first byte
//     (SCM_RIGHTS) when FD is true, else buffer Buffer passed before on
//     this connection.
//
// A memfd with a Buffer number is the connection's to reuse: the client
// keeps it mapped (MAP_SHARED; its pages stay faulted in), and once no
// batch of its views the buffer any more it names it in the next
// request's AgentSocketHeaderRelease; the agent writes another batch into
// it only then. A memfd without one (Buffer 0: the connection holds
// AgentSocketMaxBuffers already) is the client's alone. Every memfd is
// sealed against shrinking and growing, so a mapping of it can never
// fault on a missing page; one of Buffer 0 against writes too.
const (
	AgentSocketMaxRequest = 8 << 20  // a resume's state (4 MiB) with room for headers
	AgentSocketMaxHead    = 1 << 20  // the status and headers
	AgentSocketMaxInline  = 64 << 20 // an answer not passed as a memfd: errors, stats, metrics
	// AgentSocketMinFD is the smallest 200 body passed as a memfd; smaller
	// ones come inline, where a mapping would cost more than the copy.
	AgentSocketMinFD = 64 << 10
	// AgentSocketMaxBuffers and AgentSocketMaxBufferBytes bound the
	// buffers one connection keeps for reuse.
	AgentSocketMaxBuffers     = 8
	AgentSocketMaxBufferBytes = 2 << 30
	// AgentSocketHeaderRelease, on a request, lists the buffers (their
	// numbers, comma-separated) the client no longer views.
	AgentSocketHeaderRelease = "Sluice-Release"
)

// AgentSocketHead is a response's head on the agent's Unix socket.
type AgentSocketHead struct {
	Status int                 `json:"status"`
	Header map[string][]string `json:"header,omitempty"`
	Length int64               `json:"length"`
	FD     bool                `json:"fd,omitempty"`     // a file comes with this answer
	Buffer uint32              `json:"buffer,omitempty"` // the connection's buffer the body is in
}
