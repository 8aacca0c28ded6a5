import time
import nvtx

VERIFY_S = 0.006  # slow: 0.012
for i in range(12):
    nvtx.push_range("cycle")
    nvtx.push_range("draft"); time.sleep(0.004); nvtx.pop_range()
    nvtx.push_range("verify"); time.sleep(VERIFY_S); nvtx.pop_range()
    nvtx.pop_range()
