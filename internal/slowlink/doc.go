// Package slowlink is a reverse proxy on loopback that makes a local S3
// endpoint behave like a remote one: every request waits a fixed latency
// before it is forwarded, and all response bodies share one bandwidth cap.
// It counts the body bytes it passed, which is what S3 would bill. The
// shard cache's benchmark (`sluice bench cache`) and the demo put the
// function replicas behind it.
package slowlink
