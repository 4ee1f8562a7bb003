; error: src=1 (map by fd) is not supported
; at: 0
  r1 = map_fd[3] ll
  r0 = 0
  exit
