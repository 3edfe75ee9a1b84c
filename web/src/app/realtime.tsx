import type { ApolloClient } from "@apollo/client";
import { createContext, type ReactNode, useContext, useEffect, useState, useSyncExternalStore } from "react";
import { getToken, refusalMessage, signOut } from "../auth/token";
import type { ConnectionState } from "../realtime/connection";
import { Refresher, refreshOnFocus } from "../realtime/refresh";
import { NudgeSocket, socketUrl } from "../realtime/socket";
import { fetchNewEvents, fetchNewSteps } from "../realtime/timeline";

interface Realtime {
  socket: NudgeSocket;
  refresher: Refresher;
}

const RealtimeContext = createContext<Realtime | null>(null);

/** One nudge socket per signed-in client; its nudges only ever trigger re-queries. */
export function RealtimeProvider({ client, children }: { client: ApolloClient; children: ReactNode }) {
  const [realtime] = useState<Realtime>(() => {
    const refresher = new Refresher(client, { RunTimeline: fetchNewEvents, RunSteps: fetchNewSteps });
    const socket = new NudgeSocket({
      url: socketUrl(window.location),
      token: getToken,
      onNudge: (nudge) => refresher.nudge(nudge),
      onConnected: () => refresher.all(),
      onRefused: () => signOut(refusalMessage()),
    });
    return { socket, refresher };
  });
  useEffect(() => {
    realtime.socket.start();
    const stopFocus = refreshOnFocus(realtime.refresher);
    return () => {
      stopFocus();
      realtime.socket.stop();
    };
  }, [realtime]);
  return <RealtimeContext.Provider value={realtime}>{children}</RealtimeContext.Provider>;
}

export function useRealtime(): Realtime {
  const value = useContext(RealtimeContext);
  if (!value) throw new Error("useRealtime outside RealtimeProvider");
  return value;
}

export function useConnectionState(): ConnectionState {
  const { socket } = useRealtime();
  return useSyncExternalStore(socket.subscribe, socket.getSnapshot);
}
