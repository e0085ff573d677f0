// Package codesize holds the test that keeps every Go source file of the
// module at or under MaxFileLines lines, so that a file doing several jobs
// is split along its seams before it grows a further one. Functions are
// kept at or under 80 lines by golangci-lint's funlen (see .golangci.yml).
package codesize

// MaxFileLines is the most lines a Go file of the module may have. Generated
// files (a "// Code generated ... DO NOT EDIT." line before the package
// clause) are exempt; test files are not.
const MaxFileLines = 500
