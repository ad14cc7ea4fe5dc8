// Package testenv starts real servers on loopback for tests: the embedded
// NATS JetStream server and the embedded S3 endpoint, torn down with the
// test. It also has CheckFor, which polls instead of sleeping, and
// StartReady, which starts a child process up to its ready line.
package testenv
