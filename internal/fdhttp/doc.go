// Package fdhttp serves an http.Handler on a Unix socket in the framing
// wire.AgentSocketHead describes: one HTTP/1.1 request per frame, and a
// response whose large 200 body is a sealed memfd passed with it
// (SCM_RIGHTS) rather than bytes on the socket. A reader on the same node
// maps the body where the server wrote it, so a batch of tens of MB costs
// its process a mapping instead of a copy through the kernel.
//
// The handler is the one the TCP listener serves (its token check
// included), so every endpoint answers the same on both. A request's
// context ends when its client hangs up. The socket file is made with the
// mode Listen is given: who may connect is who may open it.
package fdhttp
