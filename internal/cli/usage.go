package cli

import (
	"errors"
	"strings"

	"github.com/alecthomas/kong"
)

// ExitUsage is the exit status of a command line that does not parse: an
// unknown command or flag, a missing or invalid value, flags that do not
// go together. It is 2, as for Go's flag package and most Unix tools, so
// that a script tells a mistyped call from a command that ran and failed
// (1).
const ExitUsage = 2

// UsageError is a command line that does not parse. Main prints it as one
// line that names the problem and the help of Command, and exits with
// ExitUsage.
type UsageError struct {
	// Command is the command line's command, e.g. "eventforge dlq replay":
	// the one whose --help the line points to.
	Command string
	// Err is the problem.
	Err error
}

func (e *UsageError) Error() string { return e.Err.Error() }

func (e *UsageError) Unwrap() error { return e.Err }

// line is the one line Main prints for e after the program's name.
func (e *UsageError) line() string {
	msg := strings.Join(strings.Fields(e.Err.Error()), " ") // a joined error's lines, on one
	return msg + "; see '" + e.Command + " --help'"
}

// Parse parses args with p. A command line p refuses (kong.ParseError: the
// grammar, enums, required flags and every Validate method on the selected
// command's path) is returned as a *UsageError naming the selected command,
// without printing the help. --help and --version print and exit 0 as kong
// does.
func Parse(p *kong.Kong, args []string) (*kong.Context, error) {
	kctx, err := p.Parse(args)
	var pe *kong.ParseError
	if errors.As(err, &pe) {
		command := p.Model.Name
		if pe.Context != nil {
			if n := pe.Context.Selected(); n != nil {
				command = n.FullPath()
			}
		}
		return nil, &UsageError{Command: command, Err: pe.Unwrap()}
	}
	return kctx, err
}
