// Package ready owns the line a Sluice process prints on its stdout once it
// serves: "SLUICE_READY <base URL>". `sluice fn serve`, `sluice agent` and
// `sluice controller` print it with Announce; whoever starts them (the
// local actuator, the integration suite, the load test, tests) reads it
// with Parse, line by line among other output, or with Wait, when it must
// be the first line.
//
// It is a leaf: it imports no Sluice package, so any of them may use it.
package ready
