package wire

import (
	"os"
	"strings"
	"testing"
)

// TestPythonClientSpeaksTheAgentAPI: every name of the agent's HTTP API
// the Python client uses stands in its source as a string, so renaming one
// here without the client fails.
func TestPythonClientSpeaksTheAgentAPI(t *testing.T) {
	src, err := os.ReadFile("../clients/python/sluice/loader.py")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{
		AgentPathBatch, AgentPathResume,
		AgentParamRank, AgentParamWorldSize, AgentParamDropLast, AgentParamSteps, AgentParamWaitS, AgentParamComputeS, AgentParamGeneration,
		AgentHeaderEnd, AgentEndEnded,
		MetaBatchJob, MetaBatchEpoch, MetaBatchKeys, MetaBatchReader, MetaBatchStep, MetaBatchRank,
		MetaBatchWorldSize, MetaBatchLastStep, MetaBatchPosition, MetaBatchEpochFailed, MetaBatchSources,
	} {
		if !strings.Contains(string(src), `"`+name+`"`) && !strings.Contains(string(src), `"`+name+`?`) {
			t.Errorf("clients/python/sluice/loader.py has no string %q", name)
		}
	}
}
