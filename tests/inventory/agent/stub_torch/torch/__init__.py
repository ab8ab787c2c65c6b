"""A stand-in for torch where torch is not installed: only `torch.cuda`'s allocator calls the
exporter makes, answering from the JSON file STUB_TORCH_STATS names:
{"<device>": {memory_stats() keys...}, "segments": [memory_snapshot() segments]}.
The file is read at each call, so a test can change the figures under a running exporter."""

import json
import os


class _Cuda:
    @staticmethod
    def _state():
        with open(os.environ["STUB_TORCH_STATS"]) as stats:
            return json.load(stats)

    def is_available(self):
        return True

    def is_initialized(self):
        return True

    def device_count(self):
        return len([key for key in self._state() if key.isdigit()])

    def memory_stats(self, device=None):
        return self._state().get(str(device or 0), {})

    def memory_snapshot(self):
        return self._state().get("segments", [])


cuda = _Cuda()
