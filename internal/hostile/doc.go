// Package hostile builds, for tests, the small inputs that once made a
// Sluice process take memory out of all proportion to their size (issue
// 16's reproductions): a YAML alias bomb, a tar of sparse members, and a
// large 16-bit PNG that compresses to almost nothing. Each is generated on
// the fly, so no test data file holds one.
package hostile
