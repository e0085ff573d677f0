package localstack

// What the package's external tests use of its process helpers.
var (
	Descendants = descendants
	Cmdline     = cmdline
	Alive       = alive
)
