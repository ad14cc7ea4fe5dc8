// Package embedded starts the servers Sluice runs on when nothing else is
// configured: a real NATS server with JetStream, and an S3 endpoint
// (gofakes3) on loopback. The demo, the tests and `sluice dev` use them; a
// cluster points the same components at real NATS and S3 instead.
package embedded
