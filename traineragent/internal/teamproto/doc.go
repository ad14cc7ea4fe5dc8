// Package teamproto is the team protocol between the agents of one
// reader, the floor between the reader's state (readerstate) and the
// agent's shell: the envelope every team message carries and its MAC
// under the job's team key (Auth, Head), the statuses and bounds of a
// request (protocol.go), a member agent's side (Member: its notes of the
// chunks it holds, its status, its ranks' polls for parts and their
// cutting, its forwarded resumes), and the Producer that has chunks
// produced again when a part's rows are not held here. The planner's side,
// which answers the members under the reader's lock, is the shell's
// (traineragent's teamserve.go). A Member's lock is a leaf of the agent's
// lock order.
package teamproto
