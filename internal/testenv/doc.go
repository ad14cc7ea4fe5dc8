// Package testenv starts real servers on loopback for tests: the embedded
// NATS JetStream server and the embedded S3 endpoint, torn down with the
// test; a JetStream cluster whose nodes start when the test says
// (NewNATSCluster: with fewer than a quorum up it has no meta leader, as a
// cluster still forming); and a nats-server started from a configuration
// file such as the shipped one (NATSFromConfig), recording the permissions
// violations it logs. It also has CheckFor, which polls instead of
// sleeping, and StartReady, which starts a child process up to its ready
// line.
package testenv
