"""Every call the platform makes to a server it does not run (webhook receivers, the SMTP
server, later the registry), bounded as a whole by one wall-clock :class:`Deadline`.

- :mod:`szbench.outbound.deadline`: the deadline, and the watchdog that shuts a call's
  sockets when it passes, whatever the call is doing then (resolving, connecting, a TLS
  handshake, reading headers one byte at a time);
- :mod:`szbench.outbound.http`: the HTTP client (httpcore under the deadline, with an
  address guard the caller supplies);
- :mod:`szbench.outbound.smtp`: :mod:`smtplib` under the deadline.
"""
