package doctor

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
)

// WriteText prints checks as aligned lines, status first, with each hint
// on the line below its summary, and a count at the end.
func WriteText(w io.Writer, checks []Check) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	count := map[string]int{}
	for _, c := range checks {
		count[c.Status]++
		fmt.Fprintf(tw, "%s\t%s\t%s\n", c.Status, c.Name, c.Summary)
		if c.Hint != "" {
			fmt.Fprintf(tw, "\t\t→ %s\n", c.Hint)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "\n%d ok, %d warn, %d fail\n", count[StatusOK], count[StatusWarn], count[StatusFail])
	return err
}

// WriteJSON prints {"status": the worst status, "checks": [...]}.
func WriteJSON(w io.Writer, checks []Check) error {
	if checks == nil {
		checks = []Check{}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(struct {
		Status string  `json:"status"`
		Checks []Check `json:"checks"`
	}{Worst(checks), checks})
}
